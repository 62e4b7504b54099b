// codegen/cuda/EmitCuda.h - the CUDA C emitter (private to codegen/): a
// kiln.fusion region (the input the CPU target's cpu/EmitKernel.cpp lowers to
// linalg) printed as deterministic CUDA C text, in the style of nvFuser's
// csrc/codegen.cpp (walk the kernel's ops, print readable code).
//
//   FailureOr<cuda::EmittedKernel> k = cuda::emitCudaKernel(fusion, nullptr, "fusion_0", &why);
//   std::string source = cuda::cudaPrelude() + k->source;   // what NVRTC or the simulator compiles
//   int64_t blocks = k->launch.gridBlocks({});               // static kernel: no size classes
//
// The kernel follows the kernel-source contract of issue 14 (extern "C"
// __global__, only the built-ins the simulator provides, no headers; the
// prelude is prepended by whoever compiles it). Same fusion, same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "mlir/Support/LogicalResult.h"

#include "kiln/ir/KilnOps.h"

namespace kiln::codegen {

struct KernelGeneralization; // GeneralizeKernel.h

namespace cuda {

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
  int64_t workItems(llvm::ArrayRef<int64_t> class_sizes) const;
  /// gridDim.x: ceil(workItems / work_per_block), at least 1, at most max_blocks.
  int64_t gridBlocks(llvm::ArrayRef<int64_t> class_sizes) const;
};

/// One kernel parameter, in order.
struct KernelParam {
  enum class Role {
    Operand,     ///< fusion operand `index`: `const T *__restrict__`
    Result,      ///< fusion result `index`: `T *__restrict__`
    IndexStatus, ///< status word `index` of KernelAbi's indexChecks: `long long *` [2]
    Size,        ///< size class `index` of a shape-generic kernel: `long long`
    Stride,      ///< a run-time stride of operand `index`, dim `dim` (elements): `long long`
    Scalar,      ///< KernelGeneralization::scalarConstants[index]: float / double by value
  };
  Role role;
  int index = 0;
  int dim = 0;
  std::string ctype; ///< its C type as printed
  std::string name;  ///< its name in the source
};

/// A printed kernel.
struct EmittedKernel {
  std::string name;                ///< the extern "C" symbol
  std::string source;              ///< the kernel text (after cudaPrelude())
  std::vector<KernelParam> params; ///< operands, results, status words, then sizes, strides, scalars
  LaunchRule launch;
};

/// Rows of at most this many reduced elements get a warp each; longer ones a
/// block (a warp's 32 lanes then take <= 32 elements each, still coalesced).
constexpr int64_t kWarpRowLimit = 1024;

/// Prints `fusion` as a CUDA C kernel named `name`. `generic` (or null for a
/// static kernel): dims of a size class are `long long` size parameters,
/// strides it leaves dynamic are stride parameters, its scalar constants are
/// value parameters; index math is then 64-bit. Fails with `*error` naming
/// the op and the kernel kind for what is not supported yet ("cuda emitter:
/// kiln.X in a <kind> fusion is not supported yet"), never with wrong code.
mlir::FailureOr<EmittedKernel> emitCudaKernel(ir::FusionOp fusion, const KernelGeneralization *generic,
                                             llvm::StringRef name, std::string *error);

/// The text every kernel is compiled after: the kiln_half / kiln_bf16
/// storage types (16-bit structs) and their conversions to and from float
/// (round to nearest even in portable C, NaN kept a quiet NaN; inline PTX
/// cvt.rn under __CUDA_ARCH__), the vector and load/store helpers, warp and
/// block reductions, and the scalar op helpers (kiln_maximum, kiln_floor_div,
/// ...: PyTorch's semantics as cpu/EmitScalarMath.cpp). No headers. The
/// host needs `__device__`, `__forceinline__` and the built-ins defined
/// first (the simulator's prelude, or a test's).
const std::string &cudaPrelude();

} // namespace cuda
} // namespace kiln::codegen
