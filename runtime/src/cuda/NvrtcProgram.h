// One NVRTC compile, uncached (NvrtcCompiler adds the caches).
#pragma once

#include <string>
#include <vector>

#include "kiln/runtime/cuda/Nvrtc.h"

namespace kiln::runtime::cuda {

/// What one nvrtcCompileProgram produced.
struct NvrtcOutput {
  std::string binary; ///< CUBIN bytes or PTX text
  std::string log;
  double seconds = 0; ///< wall time of create + compile + get
};

/// Compiles `source` with `options` (which include -arch) and fetches the
/// CUBIN or PTX that `target` asks for. Throws CudaError: NVRTC missing, a
/// failed call, a compile error (the log, with the failing source line), an
/// empty binary, or a kernel of `source.kernel_names` absent from the result.
NvrtcOutput run_nvrtc(const KernelSource &source, const CompileTarget &target, const std::vector<std::string> &options);

/// "13.0": nvrtc_version() for file names and keys.
std::string nvrtc_version_string();

} // namespace kiln::runtime::cuda
