// Status checks for every CUDA library call: a failed status becomes a
// CudaError whose message has the API name, the status name and its text
// ("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)").
//
//   KILN_CU_CALL(cuMemAlloc, &pointer, bytes);
//   check_nvrtc(nvrtc().nvrtcCompileProgram(program, n, options), "nvrtcCompileProgram");
#pragma once

#include <string>

#include "DriverLibrary.h"
#include "MathLibraryTypes.h"

namespace kiln::runtime::cuda {

/// "CUDA_ERROR_NO_DEVICE": from cuGetErrorName when the driver is loaded,
/// else from a table of the codes Kiln names (CudaTypes.h), else "CUresult N".
std::string driver_error_name(CUresult result);
/// "no CUDA-capable device is detected" (cuGetErrorString), or "" when the
/// driver is not loaded and the code is not in Kiln's table.
std::string driver_error_text(CUresult result);

/// Throw CudaError naming `api` when `result` is not success.
void check_driver(CUresult result, const char *api);
void check_nvrtc(nvrtcResult result, const char *api);
void check_cublaslt(cublasStatus_t status, const char *api);
void check_cudnn(cudnnStatus_t status, const char *api);
void check_nccl(ncclResult_t result, const char *api);

/// Call the driver entry point `name` from the loaded table and check it.
#define KILN_CU_CALL(name, ...)                                                                                        \
  ::kiln::runtime::cuda::check_driver(::kiln::runtime::cuda::driver().name(__VA_ARGS__), #name)

} // namespace kiln::runtime::cuda
