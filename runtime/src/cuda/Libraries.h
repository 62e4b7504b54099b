// The CUDA libraries other than the driver, each loaded lazily, once,
// thread-safely (a function-local static) from its soname: NVRTC
// (libnvrtc.so.13), cuBLASLt (libcublasLt.so.13), cuDNN (libcudnn.so.9),
// NCCL (libnccl.so.2). The symbol tables are the X-macro .def files beside
// this header (IREE's dynamic_symbol_tables.h pattern).
#pragma once

#include "DynamicLibrary.h"
#include "MathLibraryTypes.h"

namespace kiln::runtime::cuda {

#define KILN_PFN(ret, name, params) ret(*name) params = nullptr;
struct NvrtcSymbols {
#include "NvrtcSymbols.def"
};
struct CublasLtSymbols {
#include "CublasLtSymbols.def"
};
struct CudnnSymbols {
#include "CudnnSymbols.def"
};
struct NcclSymbols {
#include "NcclSymbols.def"
};
#undef KILN_PFN

/// Sonames Kiln loads (CUDA 13 toolkit; cuDNN 9; NCCL 2).
constexpr const char *kNvrtcSoname = "libnvrtc.so.13";
constexpr const char *kCublasLtSoname = "libcublasLt.so.13";
constexpr const char *kCudnnSoname = "libcudnn.so.9";
constexpr const char *kNcclSoname = "libnccl.so.2";

/// Each loads on the first call (later calls return the same table; the
/// library stays loaded for the process). `error` says why one is missing.
const LoadedLibrary<NvrtcSymbols> &nvrtc_library();
const LoadedLibrary<CublasLtSymbols> &cublaslt_library();
const LoadedLibrary<CudnnSymbols> &cudnn_library();
const LoadedLibrary<NcclSymbols> &nccl_library();

/// The loaded table; throws CudaError (CudaError.h) with the loading error
/// when the library is missing.
const NvrtcSymbols &nvrtc();
const CublasLtSymbols &cublaslt();
const CudnnSymbols &cudnn();
const NcclSymbols &nccl();

/// Uncached loads from explicit candidates (tests; kiln-cuda-info).
LoadedLibrary<NvrtcSymbols> load_nvrtc_library(const std::vector<std::string> &candidates);
LoadedLibrary<NcclSymbols> load_nccl_library(const std::vector<std::string> &candidates);

} // namespace kiln::runtime::cuda
