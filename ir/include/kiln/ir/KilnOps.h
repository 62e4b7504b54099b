// kiln/ir/KilnOps.h - the ops of the `kiln` dialect (declared in KilnOps.td).
//
// Include this to build or match kiln ops: kiln::ir::AddOp, FusionOp, ...
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/OpTable.h"
#include "kiln/ir/KilnEnums.h.inc"

#define GET_OP_CLASSES
#include "kiln/ir/KilnOps.h.inc"

namespace kiln::ir {

/// Unit attribute on an op that eager autocast runs in float32 (recorded
/// inside softmax, layer_norm, their backwards, gradient accumulation:
/// ir::Node::float32_scope). kiln-autocast computes such an op in float32
/// and removes the attribute.
inline constexpr const char *kAutocastFp32Attr = "kiln.autocast_fp32";

/// True for ops allowed inside a kiln.fusion body: kiln.constant, the
/// elementwise ops (add, sub, mul, div, neg, exp, log, relu, sqrt, rsqrt, tanh,
/// abs, sin, cos, pow, compare, select, convert) and kiln.reduce_sum /
/// kiln.reduce_max; also kiln.reshape and kiln.broadcast, which a body may
/// hold only as the row layout ops of a RowSpace (see rowSpaceOf).
bool isFusibleOp(mlir::Operation *op);

/// True for the elementwise ops (category Elementwise in Ops.def: add..relu,
/// sqrt, rsqrt, tanh, abs, sin, cos, pow, compare, select, convert).
bool isElementwiseOp(mlir::Operation *op);

/// True for the reductions (category Reduction in Ops.def: kiln.reduce_sum,
/// kiln.reduce_max, kiln.reduce_min, kiln.argmax, kiln.argmin, and the scan
/// kiln.cumsum, which keeps its operand's shape).
bool isReductionOp(mlir::Operation *op);

/// The `dims` of a reduction (isReductionOp): the reduced dims, or the one
/// scanned dim of kiln.cumsum; empty for any other op.
llvm::ArrayRef<int64_t> reductionDims(mlir::Operation *op);

/// True for the layout ops that are views at execution time (category Layout
/// in Ops.def: kiln.transpose, kiln.broadcast, kiln.reshape).
bool isLayoutOp(mlir::Operation *op);

/// True for the ops that run as one library launch outside every fusion
/// (categories Contraction and Extern in Ops.def: kiln.matmul, the conv and
/// max pool ops): GEMM-like costs to recompute, results never fused into.
bool isExternOp(mlir::Operation *op);

/// True for the ops that address memory through an index tensor (category
/// Indexing in Ops.def: kiln.gather, kiln.scatter_add). Their kernels check
/// every index (codegen's indexChecks) and never run in place or row-split.
bool isIndexingOp(mlir::Operation *op);

/// The loop nest of a **row fusion** (Inductor's persistent reduction): the
/// iteration space `shape` = [R_0..R_{rows-1}, C_0..] whose trailing dims
/// (from `rows` on) every reduction reduces, so each row is an independent
/// problem (layer_norm, softmax, log_softmax and their backwards). Values
/// are either `shape` or a **row shape**: `shape[0:rows]` followed by zero
/// or more 1s, at most rank(shape) dims ([R], [R, 1] for shape [R, C]).
struct RowSpace {
  llvm::SmallVector<int64_t> shape;
  int64_t rows = 0;

  /// True if `s` is a row shape (see above).
  bool isRowShape(llvm::ArrayRef<int64_t> s) const;
};

/// The RowSpace of `ops` (compute, constant and layout ops, program order;
/// the external values they read count as well), or failure with the
/// reason in `why`. Rules: at least one reduction; every reduction reduces
/// the same trailing dims [rows, rank) of the same operand shape, rows >= 1,
/// and that shape is not itself a row shape; every other value has that
/// shape or a row shape; a kiln.reshape maps a row shape to a row shape; a
/// kiln.broadcast maps a row shape of full rank ([R, 1]) to the space; no
/// kiln.transpose. A row fusion is one loop over rows: the backend tiles
/// the rows so each row is read from memory once.
mlir::FailureOr<RowSpace> rowSpaceOf(llvm::ArrayRef<mlir::Operation *> ops, std::string *why = nullptr);

/// True if a kiln.fusion body holds a kiln.reshape or kiln.broadcast (it is
/// then a row fusion, verified by rowSpaceOf).
bool isRowFusionBody(mlir::Block &body);

/// True for a kiln.fusion whose body has no reduction and no layout op: an
/// elementwise kernel, which reads each operand and writes each result at
/// the same index, so it may write a result over an operand of its type.
bool isElementwiseFusion(mlir::Operation *op);

/// The in-place pairs (operand index, result index) of an elementwise
/// fusion (none for other ops): each result, in order, over the first
/// operand not yet taken that has the result's type and for which
/// `dies(k)` holds (the caller's rule: operand k's memory is dead after this
/// op). One rule for codegen (which compiles the kernel for these pairs,
/// codegen/KernelAbi.cpp inPlacePairs) and kiln-remat's memory estimate.
llvm::SmallVector<std::pair<int, int>> inPlaceOperandPairs(mlir::Operation *op,
                                                           llvm::function_ref<bool(unsigned)> dies);

} // namespace kiln::ir
