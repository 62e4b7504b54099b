// kiln/passes/FlopCount.h - the FLOP model of one kiln op (Ops.def's
// FlopModel column), shared by kiln-remat's knapsack, the recompute report
// and codegen's per-kernel performance report (kiln/codegen/PerfModel.h).
#pragma once

#include <cstdint>

namespace mlir {
class Operation;
} // namespace mlir

namespace kiln::passes {

/// FLOPs of `op` (static shapes; 0 for a dynamic one): kiln.matmul 2*M*N*K
/// per batch element (the multiply-adds, as PyTorch's FlopCounterMode counts
/// mm/bmm); convolutions 2*N*Cout*Hout*Wout*(Cin/groups)*kH*kW (all three
/// directions, torch.utils.flop_counter); elementwise ops one per result
/// element; reductions one per operand element; constants and layout ops
/// (views) 0.
int64_t opFlops(mlir::Operation *op);

} // namespace kiln::passes
