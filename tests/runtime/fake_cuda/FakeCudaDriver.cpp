// A fake libcuda.so.1 for kiln-cuda-loader-tests: it proves the availability
// probe tells a stub driver, no device, an old driver and a working one
// apart without any NVIDIA software. Its behaviour comes from environment
// variables read on every call:
//   KILN_FAKE_CUDA_INIT            cuInit's result (default 0; 34 stub, 100 no device)
//   KILN_FAKE_CUDA_DRIVER_VERSION  cuDriverGetVersion (default 13000)
//   KILN_FAKE_CUDA_DEVICES         cuDeviceGetCount (default 1)
//   KILN_FAKE_CUDA_MISSING         one entry point cuGetProcAddress_v2 does not find
// Built twice: normally it exports cuGetProcAddress_v2 (a CUDA 12+ driver);
// with KILN_FAKE_CUDA_PRE_12 only cuGetProcAddress and cuInit (CUDA 11).
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kSuccess = 0;
constexpr int kNotFound = 500;     // CUDA_ERROR_NOT_FOUND
constexpr int kNotSupported = 801; // CUDA_ERROR_NOT_SUPPORTED
constexpr int kSymbolNotFound = 1; // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND

int env_int(const char *name, int fallback) {
  const char *value = std::getenv(name);
  return value && *value ? std::atoi(value) : fallback;
}

int fake_init(unsigned int) { return env_int("KILN_FAKE_CUDA_INIT", kSuccess); }
int fake_driver_version(int *version) {
  *version = env_int("KILN_FAKE_CUDA_DRIVER_VERSION", 13000);
  return kSuccess;
}
int fake_device_count(int *count) {
  *count = env_int("KILN_FAKE_CUDA_DEVICES", 1);
  return kSuccess;
}
int fake_error_name(int, const char **name) {
  *name = nullptr;
  return kNotSupported;
}
// Any other entry point: the probe never calls them.
int fake_not_supported() { return kNotSupported; }

void *entry_point(const char *symbol) {
  if (std::strcmp(symbol, "cuInit") == 0)
    return reinterpret_cast<void *>(&fake_init);
  if (std::strcmp(symbol, "cuDriverGetVersion") == 0)
    return reinterpret_cast<void *>(&fake_driver_version);
  if (std::strcmp(symbol, "cuDeviceGetCount") == 0)
    return reinterpret_cast<void *>(&fake_device_count);
  if (std::strcmp(symbol, "cuGetErrorName") == 0 || std::strcmp(symbol, "cuGetErrorString") == 0)
    return reinterpret_cast<void *>(&fake_error_name);
  return reinterpret_cast<void *>(&fake_not_supported);
}

} // namespace

#ifdef KILN_FAKE_CUDA_PRE_12
extern "C" int cuGetProcAddress(const char *symbol, void **pfn, int, uint64_t) {
  *pfn = entry_point(symbol);
  return kSuccess;
}
extern "C" int cuInit(unsigned int flags) { return fake_init(flags); }
#else
extern "C" int cuGetProcAddress_v2(const char *symbol, void **pfn, int, uint64_t, int *status) {
  const char *missing = std::getenv("KILN_FAKE_CUDA_MISSING");
  if (missing && std::strcmp(symbol, missing) == 0) {
    *pfn = nullptr;
    *status = kSymbolNotFound;
    return kNotFound;
  }
  *pfn = entry_point(symbol);
  *status = kSuccess;
  return kSuccess;
}
#endif
