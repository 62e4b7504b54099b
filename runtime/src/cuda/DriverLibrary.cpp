// Loading the CUDA driver through cuGetProcAddress_v2 (DriverLibrary.h).
#include "DriverLibrary.h"

#include "kiln/runtime/cuda/CudaError.h"

namespace kiln::runtime::cuda {
namespace {

/// cuGetProcAddress_v2 at the pinned version; null (and the reason appended
/// to `missing`) when the driver has no such entry point.
/// `stub` is set when the driver answers CUDA_ERROR_STUB_LIBRARY (the
/// toolkit's stubs/libcuda.so does so for every name).
void *proc_address(PFN_cuGetProcAddress_v2 get, const char *name, std::vector<std::string> &missing, bool &stub) {
  void *address = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult result = get(name, &address, kCudaDriverApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (result == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && address)
    return address;
  stub = stub || result == CUDA_ERROR_STUB_LIBRARY;
  if (status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
    missing.push_back(std::string(name) + " (needs a newer CUDA version than " + std::to_string(kCudaDriverApiVersion) +
                      ")");
  else
    missing.emplace_back(name);
  return nullptr;
}

void resolve_driver(PFN_cuGetProcAddress_v2 get, DriverSymbols &symbols, std::vector<std::string> &missing,
                    bool &stub) {
#define KILN_CU_PFN(name, params)                                                                                      \
  symbols.name = reinterpret_cast<decltype(symbols.name)>(proc_address(get, #name, missing, stub));
#include "DriverSymbols.def"
#undef KILN_CU_PFN
}

DriverLibrary fail(DriverLibrary library, DriverLoadFailure failure, std::string error) {
  library.failure = failure;
  library.error = std::move(error);
  return library;
}

} // namespace

DriverLibrary load_driver_library(const std::string &path) {
  DriverLibrary driver;
  std::string reason;
  driver.library = DynamicLibrary::open({path}, &reason);
  if (!driver.library)
    return fail(std::move(driver), DriverLoadFailure::NoLibrary, "cannot load " + path + " (" + reason + ")");
  auto get = reinterpret_cast<PFN_cuGetProcAddress_v2>(driver.library->symbol("cuGetProcAddress_v2"));
  if (!get) {
    bool old_driver = driver.library->symbol("cuGetProcAddress") || driver.library->symbol("cuInit");
    return fail(std::move(driver), DriverLoadFailure::NoProcAddress,
                path + (old_driver ? " is a driver older than CUDA 12.0 (it has no cuGetProcAddress_v2)"
                                   : " has no cuGetProcAddress_v2 (not a CUDA driver)"));
  }
  std::vector<std::string> missing;
  bool stub = false;
  resolve_driver(get, driver.symbols, missing, stub);
  if (stub)
    return fail(std::move(driver), DriverLoadFailure::StubLibrary,
                path + " is the CUDA toolkit's stub driver (cuGetProcAddress_v2 returned CUDA_ERROR_STUB_LIBRARY, 34)");
  if (!missing.empty())
    return fail(std::move(driver), DriverLoadFailure::MissingSymbols,
                path + " lacks " + join_names(missing) + " at CUDA API version " +
                    std::to_string(kCudaDriverApiVersion));
  return driver;
}

// Leaked on purpose: the driver is never dlclose'd at exit.
const DriverLibrary &driver_library() {
  static const auto *driver = new DriverLibrary(load_driver_library(kDriverSoname));
  return *driver;
}

const DriverSymbols &driver() {
  const DriverLibrary &loaded = driver_library();
  if (!loaded.loaded())
    throw CudaError(kDriverSoname, "load", -1, loaded.error);
  return loaded.symbols;
}

} // namespace kiln::runtime::cuda
