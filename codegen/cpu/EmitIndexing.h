// codegen/cpu/EmitIndexing.h (private) - the linalg/scf lowering of the
// kiln ops that address memory through an index tensor (kiln.gather,
// kiln.scatter_add) and of their index checks (runtime/IndexCheck.h).
// EmitKernel.cpp calls these while it translates a fusion body.
#pragma once

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace kiln::codegen::cpu {

/// kiln.gather: a linalg.generic over the index (the result's shape) whose
/// element is `input[.., index, ..]` read with tensor.extract (the index in
/// dimension `dim`, the loop indices elsewhere), widened to f32 for
/// bf16/f16 input. An index outside [0, size) is clamped into it, so the
/// kernel never reads outside `input`; the status word reports it.
/// `resultType`: the result's compute type.
mlir::Value emitGather(mlir::OpBuilder &b, mlir::Location loc, int64_t dim, mlir::Value input, mlir::Value index,
                       mlir::RankedTensorType resultType);

/// kiln.scatter_add: `input` copied into a tensor of `resultType` (the
/// compute type), then one sequential scf.for nest over the index in
/// row-major order adding `src[p]` at `[.., index[p], .., ]` (tensor.insert
/// on the loop-carried tensor): deterministic, a repeated index accumulates
/// in that order. An index outside [0, size) is skipped.
mlir::Value emitScatterAdd(mlir::OpBuilder &b, mlir::Location loc, int64_t dim, mlir::Value input, mlir::Value index,
                           mlir::Value src, mlir::RankedTensorType resultType);

/// The index check's status word, a tensor<2xi64> {found, first bad index}
/// (IndexCheck.h): a linalg.generic reducing over all of `index` in
/// row-major order; bad means outside [0, size).
mlir::Value emitIndexStatus(mlir::OpBuilder &b, mlir::Location loc, mlir::Value index, int64_t size);

} // namespace kiln::codegen::cpu
