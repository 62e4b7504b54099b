// codegen/cpu/passes/LinalgUtils.h - small facts about linalg ops that the
// kiln-cpu-* passes share.
#pragma once

#include <cstdint>
#include <limits>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace kiln::codegen {

/// The body of `generic` only yields one of its inputs: a broadcast or a
/// unit-dim copy (EmitKernel's broadcastRows / dropUnitDims).
inline bool isCopy(mlir::linalg::GenericOp generic) {
  mlir::Block &body = generic.getRegion().front();
  if (body.getOperations().size() != 1)
    return false;
  auto yielded = mlir::dyn_cast<mlir::BlockArgument>(body.getTerminator()->getOperand(0));
  return yielded && yielded.getArgNumber() < generic.getNumDpsInputs();
}

/// Cheap enough to compute once per consumer: at most four arith ops and no
/// division or math function (x - mean is; exp(x - max) is not).
inline bool isCheap(mlir::linalg::GenericOp generic) {
  mlir::Block &body = generic.getRegion().front();
  if (body.getOperations().size() > 5)
    return false;
  return llvm::all_of(body.without_terminator(), [](mlir::Operation &op) {
    return op.getDialect()->getNamespace() == "arith" && !mlir::isa<mlir::arith::DivFOp, mlir::arith::DivSIOp, mlir::arith::RemFOp>(op);
  });
}

/// Iterations of `op`'s loop nest: the product of its static loop ranges;
/// a dynamic range counts as large (2^31 - 1 for the whole nest).
inline int64_t loopIterations(mlir::linalg::LinalgOp op) {
  int64_t n = 1;
  for (int64_t size : op.getStaticLoopRanges())
    n = mlir::ShapedType::isDynamic(size) ? std::numeric_limits<int32_t>::max() : n * size;
  return n;
}

} // namespace kiln::codegen
