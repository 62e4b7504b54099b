// codegen/KernelAbi.h - the operand ABI every target's kernels share
// (private to codegen/): storage dtypes, run-time operand strides, memory
// roots of views, and the in-place pairs of a kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "mlir/IR/Value.h"
#include "mlir/Support/LogicalResult.h"

#include "kiln/ir/KilnOps.h"
#include "kiln/runtime/DType.h"
#include "kiln/runtime/LaunchExecutable.h"

namespace kiln::codegen {

/// The dtype a kiln tensor element type is stored as at run time: f32, f16,
/// bf16, i64, i1 (one byte per element). Fails for anything else.
mlir::FailureOr<DType> dtypeOf(mlir::Type elementType);

/// The element strides each operand of `fusion` has at run time: function
/// arguments, kernel and GEMM results are row-major (the runtime copies
/// non-contiguous inputs, LaunchExecutable::Builder::addInput); transpose,
/// broadcast (stride 0) and reshape (a view when PyTorch's view rule allows,
/// else a row-major copy) follow runtime::LaunchExecutable's rules. Kernels
/// are compiled for these strides (static memref layouts), which lets LLVM
/// vectorize loops over broadcast and transposed operands; the executable
/// builder checks each launch against them.
std::vector<std::vector<int64_t>> operandStrides(kiln::ir::FusionOp fusion);

/// The value whose memory `value` uses: looks through layout ops (views).
mlir::Value memoryRoot(mlir::Value value);

/// The operands whose memory results of `fusion`'s kernel may take over
/// (runtime::InPlace, LaunchExecutable's memory plan). Only an elementwise
/// kernel (no reduction, no row fusion) has them: for each result in order,
/// the first operand not yet paired that has the result's type (shape and
/// dtype), is row-major, and dies here — its buffer (through views) is
/// produced in this function (or is a `saved` argument, which backward
/// donates), is not returned, and is read by no later op and by no other
/// operand of this fusion. emitKernel tags such a kernel `kiln.in_place =
/// [operand argument, result argument, ...]`, and the lowering gives it a
/// branch for equal addresses (kiln-cpu-in-place-branch).
std::vector<runtime::InPlace> inPlacePairs(kiln::ir::FusionOp fusion);

/// The index checks of `fusion`'s kernel, one per kiln.gather /
/// kiln.scatter_add of its body in body order (runtime/IndexCheck.h): the
/// op the user called (a gather's `source`, else "scatter_add"), the
/// indexed dim and its size. The kernel has one extra result per check,
/// after the fusion's results: its int64 [2] status word, which the
/// executable reads after the launch (Builder::addIndexCheck).
std::vector<runtime::IndexCheck> indexChecks(kiln::ir::FusionOp fusion);

} // namespace kiln::codegen
