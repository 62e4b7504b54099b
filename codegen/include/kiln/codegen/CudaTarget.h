// kiln/codegen/CudaTarget.h - registering the CUDA compile target (plain
// C++, no MLIR: the frontend calls it). The target itself is
// codegen/cuda/CudaTarget.cpp (`cudaTarget()`, kiln/codegen/Target.h).
#pragma once

#include <string>
#include <vector>

namespace kiln::codegen {

/// Makes the CUDA target serve DeviceType::CUDA (register_target), so that
/// kiln::compile of a module whose parameters and inputs are on a CUDA
/// device (a GPU, or the simulator under KILN_CUDA_SIM=1) compiles its
/// kiln.fusion kernels as CUDA C. Idempotent; thread-safe.
void registerCudaTarget();

namespace cuda {

/// One compiled graph's CUDA module: the translation unit the device
/// compiled (cudaPrelude() + each distinct kernel) and its kernels' names.
struct CompiledGraphSource {
  std::string source;
  std::vector<std::string> kernel_names;
};

/// Every CUDA module the CUDA target compiled or loaded from the kernel
/// cache in this process, oldest first (tests compile each with NVRTC for
/// sm_90 and check ptxas' spill counts).
std::vector<CompiledGraphSource> compiledGraphSources();

} // namespace cuda

} // namespace kiln::codegen
