// kiln/runtime/cuda/CudaError.h - the error every CUDA call in the runtime
// throws: a std::runtime_error (the runtime's convention; the frontend
// rethrows it as kiln::Error) that also carries the library, the API and
// its status code.
//
//   try { ... } catch (const kiln::runtime::cuda::CudaError &e) {
//     e.api();   // "cuMemAlloc"
//     e.code();  // 2 (CUDA_ERROR_OUT_OF_MEMORY)
//     e.what();  // "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
//   }
#pragma once

#include <stdexcept>
#include <string>

namespace kiln::runtime::cuda {

class CudaError : public std::runtime_error {
public:
  /// `library`: "libcuda.so.1", "libnvrtc.so.13", ...; `api`: the function
  /// that failed ("load" when the library itself is missing); `code`: its
  /// status (CUresult, nvrtcResult, cublasStatus_t, ...; -1 for "load");
  /// `message`: the whole text what() returns.
  CudaError(std::string library, std::string api, int code, const std::string &message)
      : std::runtime_error(message), library_(std::move(library)), api_(std::move(api)), code_(code) {}

  const std::string &library() const { return library_; }
  const std::string &api() const { return api_; }
  int code() const { return code_; }

private:
  std::string library_;
  std::string api_;
  int code_;
};

} // namespace kiln::runtime::cuda
