// JointGraph.h - what kiln-remat and kiln-partition both need to know about
// func @joint (internal to passes/lib): the forward and backward slices, the
// forward values backward reads, and the byte / FLOP cost model of an op.
#pragma once

#include "kiln/passes/FlopCount.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <cstdint>

namespace kiln::passes {

using OpSet = llvm::DenseSet<mlir::Operation *>;

/// The slices of a joint forward+backward function (func @joint from the
/// GraphBuilder: arguments carry kiln.role = "primal" | "tangent", the first
/// `kiln.num_forward_outputs` results are forward outputs, the rest are
/// gradients).
struct JointSlices {
  unsigned numForwardOutputs = 0;
  /// True when there is nothing to split: no tangent arguments and no
  /// gradient results. The other fields are then empty.
  bool forwardOnly = false;
  /// Ops the forward outputs depend on (they run in @forward).
  OpSet forward;
  /// Ops the gradients depend on that are not forward ops (they run in
  /// @backward).
  OpSet backward;
  /// Results of forward ops that backward reads: operands of backward ops
  /// and gradients returned directly. Program order of the producers.
  llvm::SetVector<mlir::Value> needed;
  /// The forward outputs (returned by @forward anyway).
  llvm::DenseSet<mlir::Value> forwardOutputs;
};

/// True if argument `index` of `func` has kiln.role = "tangent".
bool isTangentArgument(mlir::func::FuncOp func, unsigned index);

/// Checks the shape of @joint (one block ending in func.return,
/// kiln.num_forward_outputs in range, no forward op or forward output using a
/// tangent) and computes its slices. Errors are emitted on the offending op.
mlir::LogicalResult analyzeJoint(mlir::func::FuncOp joint, JointSlices &slices);

// valueBytes (bytes of a value, as the runtime stores it): kiln/passes/FlopCount.h.

// opFlops (the FLOP model of kiln-remat and the recompute report): kiln/passes/FlopCount.h.

/// kiln-remat's default recompute allowlist (AOTAutograd's
/// min_cut_rematerialization_partition: pointwise ops, views, casts,
/// constants, and reductions whose result is at least a quarter of their
/// operand's bytes; PyTorch's "ban_recompute_reductions" rule). Matmuls and
/// larger reductions are recomputed only under a memory budget below 1.
bool isCheapToRecompute(mlir::Operation *op);

/// Whether `op` may be recomputed at all (budget 0): a pure kiln op.
bool isRecomputable(mlir::Operation *op);

} // namespace kiln::passes
