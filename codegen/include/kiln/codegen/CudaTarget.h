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

/// One translation unit of a compiled graph's kernels (a graph's distinct
/// kernels are split into several, compiled in parallel): the source the
/// device compiled (cudaPrelude() + a few kernels), its kernels' names,
/// and which compiled graph of the process it belongs to (0, 1, ...).
struct CompiledGraphSource {
  std::string source;
  std::vector<std::string> kernel_names;
  size_t graph = 0;
};

/// Starts (true) or stops recording the translation units the CUDA target
/// compiles or loads from the kernel cache, for compiledGraphSources. Off by
/// default: a long-running process would otherwise keep every graph's CUDA
/// source for its whole life.
void recordGraphSources(bool on);

/// Every CUDA module the CUDA target compiled or loaded from the kernel
/// cache in this process while recording was on (recordGraphSources), oldest
/// first (tests compile each with NVRTC for sm_90 and check ptxas' spill
/// counts); CompiledGraphSource::graph counts every compiled graph.
std::vector<CompiledGraphSource> compiledGraphSources();

/// The prelude every translation unit of the CUDA target starts with
/// (EmitCuda.h's cudaPrelude()).
std::string graphPrelude();

} // namespace cuda

} // namespace kiln::codegen
