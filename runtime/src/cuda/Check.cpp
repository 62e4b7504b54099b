// Status names and the checks that throw CudaError (Check.h).
#include "Check.h"

#include "Libraries.h"
#include "kiln/runtime/cuda/CudaError.h"

namespace kiln::runtime::cuda {
namespace {

struct KnownDriverError {
  CUresult code;
  const char *name;
  const char *text;
};

/// The codes the availability reasons name, worded as cuGetErrorString
/// words them, for when there is no driver to ask.
constexpr KnownDriverError kKnownDriverErrors[] = {
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_INSUFFICIENT_DRIVER, "CUDA_ERROR_INSUFFICIENT_DRIVER",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempted to use stream capture from a thread other than the one that began it"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const KnownDriverError *known_driver_error(CUresult result) {
  for (const KnownDriverError &known : kKnownDriverErrors)
    if (known.code == result)
      return &known;
  return nullptr;
}

/// "<api> failed: <name> (<text>)", or without the parenthesis when empty.
std::string failure_message(const char *api, const std::string &name, const std::string &text) {
  std::string message = std::string(api) + " failed: " + name;
  if (!text.empty())
    message += " (" + text + ")";
  return message;
}

std::string or_empty(const char *text) { return text ? text : ""; }

} // namespace

std::string driver_error_name(CUresult result) {
  const DriverLibrary &loaded = driver_library();
  const char *name = nullptr;
  if (loaded.loaded() && loaded.symbols.cuGetErrorName(result, &name) == CUDA_SUCCESS && name)
    return name;
  if (const KnownDriverError *known = known_driver_error(result))
    return known->name;
  return "CUresult " + std::to_string(result);
}

std::string driver_error_text(CUresult result) {
  const DriverLibrary &loaded = driver_library();
  const char *text = nullptr;
  if (loaded.loaded() && loaded.symbols.cuGetErrorString(result, &text) == CUDA_SUCCESS && text)
    return text;
  const KnownDriverError *known = known_driver_error(result);
  return known ? known->text : "";
}

void check_driver(CUresult result, const char *api) {
  if (result == CUDA_SUCCESS)
    return;
  throw CudaError(kDriverSoname, api, result,
                  failure_message(api, driver_error_name(result), driver_error_text(result)));
}

void check_nvrtc(nvrtcResult result, const char *api) {
  if (result == NVRTC_SUCCESS)
    return;
  std::string name = "nvrtcResult " + std::to_string(result);
  if (nvrtc_library().loaded())
    name = or_empty(nvrtc_library().symbols.nvrtcGetErrorString(result));
  throw CudaError(kNvrtcSoname, api, result, failure_message(api, name, ""));
}

void check_cublaslt(cublasStatus_t status, const char *api) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return;
  std::string name = "cublasStatus_t " + std::to_string(status), text;
  if (cublaslt_library().loaded()) {
    name = or_empty(cublaslt_library().symbols.cublasLtGetStatusName(status));
    text = or_empty(cublaslt_library().symbols.cublasLtGetStatusString(status));
  }
  throw CudaError(kCublasLtSoname, api, status, failure_message(api, name, text));
}

void check_cudnn(cudnnStatus_t status, const char *api) {
  if (status == CUDNN_STATUS_SUCCESS)
    return;
  std::string name = "cudnnStatus_t " + std::to_string(status);
  if (cudnn_library().loaded())
    name = or_empty(cudnn_library().symbols.cudnnGetErrorString(status));
  throw CudaError(kCudnnSoname, api, status, failure_message(api, name, ""));
}

void check_nccl(ncclResult_t result, const char *api) {
  if (result == ncclSuccess)
    return;
  std::string name = "ncclResult_t " + std::to_string(result);
  if (nccl_library().loaded())
    name = or_empty(nccl_library().symbols.ncclGetErrorString(result));
  throw CudaError(kNcclSoname, api, result, failure_message(api, name, ""));
}

} // namespace kiln::runtime::cuda
