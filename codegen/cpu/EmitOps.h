// codegen/cpu/EmitOps.h - linalg emission of the issue-13 kiln ops, used by
// EmitKernel.cpp's KernelEmitter (private to codegen/cpu).
//
//   EmitScalarMath.cpp  scalar bodies of erf, floor/ceil/round/trunc,
//                       maximum/minimum, floor_div, remainder, fmod and the
//                       integer kiln.div (arith/math ops on one element)
//   EmitArgScan.cpp     kiln.argmax / kiln.argmin (two linalg reductions)
//                       and kiln.cumsum (an scf.for along the dim)
#pragma once

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"

namespace kiln::codegen::cpu {

/// True for the elementwise ops whose body emitScalarOp builds.
bool hasScalarBody(mlir::Operation *op);

/// The result element of `op` (hasScalarBody) computed from the widened
/// operand elements `args` of compute type `element` (f32 for bf16/f16).
/// Semantics as PyTorch's CPU kernels (aten/src/ATen/native/cpu/
/// BinaryOpsKernel.cpp, BinaryOps.h): maximum/minimum propagate NaN and keep
/// lhs on ties; floor_div is div_floor_floating / div_floor_integer;
/// remainder takes the divisor's sign, fmod the dividend's. An integer
/// divisor of 0 gives 0 (eager raises ZeroDivisionError; a kernel cannot).
mlir::Value emitScalarOp(mlir::Operation *op, mlir::OpBuilder &b, mlir::Location loc, mlir::ValueRange args,
                         mlir::Type element);

/// Signed integer a / b truncated toward zero (kiln.div on integers), 0
/// where b is 0 (LLVM's sdiv by zero is undefined and traps on x86).
mlir::Value emitIntegerDivide(mlir::OpBuilder &b, mlir::Location loc, mlir::Value a, mlir::Value d);

/// kiln.argmax (isMax) / kiln.argmin of `input` along `dim`: an i64 tensor
/// of input's shape without `dim`. m = the NaN-propagating max/min of each
/// line, then the smallest index j with input[j] == m or input[j] NaN.
mlir::Value emitArgReduction(mlir::OpBuilder &b, mlir::Location loc, mlir::Value input, int64_t dim, bool isMax);

/// kiln.cumsum of `input` along `dim` into `resultType` (the compute type):
/// an scf.for over the dim carrying the running sum of one slice (f64 for
/// floats, i64 for integers, as the eager kernel) and writing each prefix
/// into its slice of the result; the slices' adds are linalg.generics, so
/// the other dims are vectorized.
mlir::Value emitCumsum(mlir::OpBuilder &b, mlir::Location loc, mlir::Value input, int64_t dim,
                       mlir::RankedTensorType resultType);

} // namespace kiln::codegen::cpu
