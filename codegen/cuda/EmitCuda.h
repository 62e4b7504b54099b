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

#include "kiln/codegen/CudaLaunch.h"
#include "kiln/ir/KilnOps.h"

namespace kiln::codegen {

struct KernelGeneralization; // GeneralizeKernel.h

namespace cuda {

// KernelKind, kindName and LaunchRule: kiln/codegen/CudaLaunch.h.

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

// kWarpRowLimit (warp vs block rows): kiln/codegen/CudaLaunch.h.

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
