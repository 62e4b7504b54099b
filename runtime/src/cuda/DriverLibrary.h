// The CUDA driver API loaded at run time: dlopen("libcuda.so.1"), take only
// cuGetProcAddress_v2 by name, and every other entry point through it at a
// pinned API version (IREE's runtime/src/iree/hal/drivers/cuda/
// dynamic_symbol_tables.h; cuda.h documents cuGetProcAddress). The table is
// DriverSymbols.def.
#pragma once

#include <memory>
#include <string>

#include "CudaTypes.h"
#include "DynamicLibrary.h"

namespace kiln::runtime::cuda {

/// The driver soname (the NVIDIA driver package installs it; the toolkit's
/// stubs/libcuda.so is a link-time stub whose cuInit returns 34).
constexpr const char *kDriverSoname = "libcuda.so.1";
/// The CUDA API version every entry point is resolved at: 12.0 is the first
/// with cuGetProcAddress_v2, and pinning it fixes each name's variant (the
/// parameter lists in DriverSymbols.def) whatever newer driver is installed.
constexpr int kCudaDriverApiVersion = 12000;

#define KILN_CU_PFN(name, params) CUresult(*name) params = nullptr;
struct DriverSymbols {
#include "DriverSymbols.def"
};
#undef KILN_CU_PFN

/// Why the driver table did not load (Availability.cpp words the reasons).
enum class DriverLoadFailure {
  None,
  NoLibrary,      ///< dlopen(libcuda.so.1) failed
  NoProcAddress,  ///< no cuGetProcAddress_v2: a pre-12.0 driver or not a driver
  StubLibrary,    ///< the toolkit's stubs/libcuda.so (it answers CUDA_ERROR_STUB_LIBRARY)
  MissingSymbols, ///< cuGetProcAddress_v2 found no variant of some entry points at 12000
};

/// A loaded (or failed) driver table.
struct DriverLibrary {
  std::unique_ptr<DynamicLibrary> library;
  DriverSymbols symbols;
  DriverLoadFailure failure = DriverLoadFailure::None;
  std::string error; ///< empty when loaded
  bool loaded() const { return failure == DriverLoadFailure::None; }
};

/// Loads the driver from `path` (a soname or a file), uncached: for the
/// availability probe with another driver (tests' fake libcuda).
DriverLibrary load_driver_library(const std::string &path);

/// libcuda.so.1, loaded on the first call, once, thread-safely.
const DriverLibrary &driver_library();

/// The loaded driver table; throws CudaError with the loading error when the
/// driver is missing. Prefer is_available() (Availability.h) for checks.
const DriverSymbols &driver();

} // namespace kiln::runtime::cuda
