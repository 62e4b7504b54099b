// kiln/codegen/CudaLaunch.h - how a kernel of the CUDA C emitter
// (codegen/cuda) is launched: its kind and its launch rule. Plain C++ (no
// MLIR), so the eager CUDA runner (kiln/codegen/EagerCuda.h) and the
// emitter share one rule.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::codegen::cuda {

/// Rows of at most this many reduced elements get a warp each; longer ones a
/// block (a warp's 32 lanes then take <= 32 elements each, still coalesced).
constexpr int64_t kWarpRowLimit = 1024;

/// The kernel shapes the emitter prints (codegen/cuda/README.md).
enum class KernelKind {
  Pointwise,  ///< elementwise ops (and gathers) over one iteration space: a thread per element (or per vector)
  WarpRows,   ///< a reduction fusion whose reduced extent is <= kWarpRowLimit: a warp per output row
  BlockRows,  ///< the same with longer rows: a block per row, warp shuffles + shared memory
  Scan,       ///< kiln.cumsum: a block per line, chunks scanned in a fixed order
  ScatterAdd, ///< kiln.scatter_add: a thread per destination element, contributions in index order
};

/// The name of `kind` ("pointwise", "warp-rows", ...), for errors and dumps.
const char *kindName(KernelKind kind);

/// How the runtime launches the kernel. Every kernel loops over its work
/// with a grid-stride loop, so any grid size is correct; this is the one
/// the emitter chose. 1-D grids and blocks.
struct LaunchRule {
  KernelKind kind = KernelKind::Pointwise;
  int64_t block_threads = 256;      ///< blockDim.x
  int64_t static_work = 1;          ///< work items = static_work * product of the work_classes' sizes
  std::vector<int> work_classes;    ///< size classes of a shape-generic kernel (KernelGeneralization::sources)
  int64_t work_per_block = 1;       ///< work items one block takes per grid-stride step
  int64_t max_blocks = 65536;       ///< grid cap (the grid-stride loop covers the rest)
  int64_t dynamic_shared_bytes = 0; ///< extern __shared__ kiln_smem bytes (none today: static arrays)
  int64_t workspace_bytes = 0;      ///< global scratch the runtime passes (none today: no float atomics, no partials)

  /// Work items for these size-class sizes (one per class of the kernel).
  int64_t workItems(const std::vector<int64_t> &class_sizes) const;
  /// gridDim.x: ceil(workItems / work_per_block), at least 1, at most max_blocks.
  int64_t gridBlocks(const std::vector<int64_t> &class_sizes) const;
};

} // namespace kiln::codegen::cuda
