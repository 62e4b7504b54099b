// Loading NVRTC, cuBLASLt, cuDNN and NCCL by soname (Libraries.h).
#include "Libraries.h"

#include "kiln/runtime/cuda/CudaError.h"

namespace kiln::runtime::cuda {
namespace {

void *find(const DynamicLibrary &library, const char *name, std::vector<std::string> &missing) {
  void *address = library.symbol(name);
  if (!address)
    missing.emplace_back(name);
  return address;
}

#define KILN_PFN(ret, name, params)                                                                                    \
  symbols.name = reinterpret_cast<decltype(symbols.name)>(find(library, #name, missing));

void resolve_nvrtc(const DynamicLibrary &library, NvrtcSymbols &symbols, std::vector<std::string> &missing) {
#include "NvrtcSymbols.def"
}
void resolve_cublaslt(const DynamicLibrary &library, CublasLtSymbols &symbols, std::vector<std::string> &missing) {
#include "CublasLtSymbols.def"
}
void resolve_cudnn(const DynamicLibrary &library, CudnnSymbols &symbols, std::vector<std::string> &missing) {
#include "CudnnSymbols.def"
}
void resolve_nccl(const DynamicLibrary &library, NcclSymbols &symbols, std::vector<std::string> &missing) {
#include "NcclSymbols.def"
}
#undef KILN_PFN

/// The loaded table or a CudaError naming the library and why it is missing.
template <class Symbols> const Symbols &require(const LoadedLibrary<Symbols> &loaded, const char *soname) {
  if (!loaded.loaded())
    throw CudaError(soname, "load", -1, loaded.error);
  return loaded.symbols;
}

} // namespace

// Leaked on purpose: a loaded CUDA library is never dlclose'd at exit (its
// own threads and atexit handlers may still run).
const LoadedLibrary<NvrtcSymbols> &nvrtc_library() {
  static const auto *loaded =
      new LoadedLibrary<NvrtcSymbols>(load_library(toolkit_library_candidates(kNvrtcSoname), resolve_nvrtc));
  return *loaded;
}
const LoadedLibrary<CublasLtSymbols> &cublaslt_library() {
  static const auto *loaded =
      new LoadedLibrary<CublasLtSymbols>(load_library(toolkit_library_candidates(kCublasLtSoname), resolve_cublaslt));
  return *loaded;
}
const LoadedLibrary<CudnnSymbols> &cudnn_library() {
  static const auto *loaded =
      new LoadedLibrary<CudnnSymbols>(load_library(toolkit_library_candidates(kCudnnSoname), resolve_cudnn));
  return *loaded;
}
const LoadedLibrary<NcclSymbols> &nccl_library() {
  static const auto *loaded =
      new LoadedLibrary<NcclSymbols>(load_library(toolkit_library_candidates(kNcclSoname), resolve_nccl));
  return *loaded;
}

const NvrtcSymbols &nvrtc() { return require(nvrtc_library(), kNvrtcSoname); }
const CublasLtSymbols &cublaslt() { return require(cublaslt_library(), kCublasLtSoname); }
const CudnnSymbols &cudnn() { return require(cudnn_library(), kCudnnSoname); }
const NcclSymbols &nccl() { return require(nccl_library(), kNcclSoname); }

LoadedLibrary<NvrtcSymbols> load_nvrtc_library(const std::vector<std::string> &candidates) {
  return load_library(candidates, resolve_nvrtc);
}
LoadedLibrary<NcclSymbols> load_nccl_library(const std::vector<std::string> &candidates) {
  return load_library(candidates, resolve_nccl);
}

} // namespace kiln::runtime::cuda
