// kiln/runtime/KernelHandle.h - an opaque handle to one compiled kernel, as a
// Target's kernel library hands it out, and the arguments of one launch.
//
// A backend's launch() is the only code that looks inside a handle. The CPU
// (and any host-accessible backend that forwards to it) calls `packed` in
// MLIR's packed convention; a device backend keeps its own object (a loaded
// CUDA function, say) in `native`.
#pragma once

#include <memory>
#include <vector>

#include "kiln/runtime/TensorView.h"

namespace kiln::runtime {

/// A JIT kernel in MLIR's packed calling convention (ExecutionEngine::lookupPacked):
/// args[i] points at each scalar of the flattened argument list; a memref of
/// rank r contributes 3 + 2r entries (allocated ptr, aligned ptr, offset,
/// sizes..., strides...).
using PackedKernel = void (*)(void **args);

struct KernelHandle {
  /// Host-callable entry (CPU kernels): one memref descriptor per operand,
  /// then one per result (DeviceBackend::launch builds them).
  PackedKernel packed = nullptr;
  /// The kernel reads every size of dim 0 from its descriptors and dim 0 is
  /// one parallel loop over all operands and results (codegen's
  /// isRowSplittable): the backend may run it on disjoint row ranges.
  bool split_rows = false;
  /// Backend-defined kernel object (null for CPU kernels); kept alive by the
  /// handle.
  std::shared_ptr<const void> native;

  static KernelHandle cpu(PackedKernel fn, bool split_rows = false) { return KernelHandle{fn, split_rows, nullptr}; }
  explicit operator bool() const { return packed != nullptr || native != nullptr; }
};

/// The tensors of one kernel launch: operands (strided views), then results
/// (fresh contiguous tensors the kernel writes), in the kernel's argument
/// order. Pointers stay valid for the launch only.
struct KernelArgs {
  std::vector<const TensorView *> operands;
  std::vector<const TensorView *> results;
};

} // namespace kiln::runtime
