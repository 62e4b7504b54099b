// kiln/passes/FlopCount.h - the FLOP model of one kiln op (Ops.def's
// FlopModel column) and the bytes of a value, shared by kiln-remat's
// knapsack, the recompute report, the memory plan and codegen's fusion and
// per-kernel performance reports (kiln/codegen/PerfModel.h).
#pragma once

#include <cstdint>

namespace mlir {
class Operation;
class Value;
} // namespace mlir

namespace kiln::passes {

/// FLOPs of `op` (static shapes; 0 for a dynamic one): kiln.matmul 2*M*N*K
/// per batch element (the multiply-adds, as PyTorch's FlopCounterMode counts
/// mm/bmm); convolutions 2*N*Cout*Hout*Wout*(Cin/groups)*kH*kW (all three
/// directions, torch.utils.flop_counter); elementwise ops one per result
/// element; reductions one per operand element; constants and layout ops
/// (views) 0.
int64_t opFlops(mlir::Operation *op);

/// Bytes of a statically shaped ranked tensor value: elements x ceil(bit
/// width / 8) (i1 is one byte, as the runtime stores it); 0 for anything
/// else (a dynamic shape, a non-tensor).
int64_t valueBytes(mlir::Value value);

} // namespace kiln::passes
