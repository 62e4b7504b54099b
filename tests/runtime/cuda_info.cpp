// kiln-cuda-info: prints what Kiln finds of CUDA on this machine (the
// availability reason, NVRTC and its architectures, the math libraries, the
// kernel cache folder). Exits 0 whatever is missing: it is a diagnostic.
#include <cstdio>

#include "Libraries.h"
#include "kiln/runtime/cuda/Availability.h"
#include "kiln/runtime/cuda/Nvrtc.h"

namespace cuda = kiln::runtime::cuda;

namespace {

template <class Symbols> void print_library(const char *soname, const cuda::LoadedLibrary<Symbols> &loaded) {
  if (loaded.loaded())
    std::printf("%-18s loaded (%s)\n", soname, loaded.library->name().c_str());
  else
    std::printf("%-18s missing: %s\n", soname, loaded.error.c_str());
}

void print_nvrtc() {
  if (!cuda::nvrtc_available()) {
    std::printf("nvrtc              missing: %s\n", cuda::nvrtc_unavailable_reason().c_str());
    return;
  }
  cuda::NvrtcVersion version = cuda::nvrtc_version();
  std::printf("nvrtc              %d.%d, archs:", version.major, version.minor);
  for (int arch : cuda::nvrtc_supported_archs())
    std::printf(" sm_%d", arch);
  std::printf("\n");
}

} // namespace

int main() {
  std::printf("kiln-cuda-info: %s\n", cuda::availability_reason().c_str());
  std::printf("devices            %d\n", cuda::device_count());
  print_nvrtc();
  print_library(cuda::kCublasLtSoname, cuda::cublaslt_library());
  print_library(cuda::kCudnnSoname, cuda::cudnn_library());
  print_library(cuda::kNcclSoname, cuda::nccl_library());
  std::string dir = cuda::default_kernel_cache_dir();
  std::printf("kernel cache       %s\n", dir.empty() ? "(disabled)" : dir.c_str());
  return 0;
}
