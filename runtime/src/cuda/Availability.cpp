// The CUDA availability probe (Availability.h): driver, cuInit, driver
// version, NVRTC, devices, in that order; the first missing piece is the
// reason.
#include "kiln/runtime/cuda/Availability.h"

#include "Check.h"
#include "DriverLibrary.h"
#include "Libraries.h"
#include "kiln/runtime/cuda/CudaError.h"

namespace kiln::runtime::cuda {
namespace {

constexpr const char *kPrefix = "CUDA is not available: ";
constexpr const char *kStubAdvice = ": a lib64/stubs folder is on the library path ahead of the real driver; remove "
                                    "it from LD_LIBRARY_PATH, or install the NVIDIA driver";

/// 12020 -> "12.2" (cuDriverGetVersion's encoding: 1000 * major + 10 * minor).
std::string cuda_version_string(int version) {
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

AvailabilityReport fail(AvailabilityReport report, CudaStatus status, std::string reason) {
  report.status = status;
  report.reason = kPrefix + reason;
  return report;
}

/// The reason for a failed cuInit, by its code.
AvailabilityReport init_failure(AvailabilityReport report, const std::string &driver_path, CUresult result) {
  report.init_result = result;
  std::string returned = "cuInit returned " + driver_error_name(result) + " (" + std::to_string(result) + ")";
  if (result == CUDA_ERROR_STUB_LIBRARY)
    return fail(std::move(report), CudaStatus::StubDriver,
                driver_path + " is the CUDA toolkit's stub driver (" + returned + ")" + kStubAdvice);
  if (result == CUDA_ERROR_NO_DEVICE)
    return fail(std::move(report), CudaStatus::NoDevice,
                "the driver found no CUDA device (" + returned +
                    "); check nvidia-smi and CUDA_VISIBLE_DEVICES, or run on the CPU");
  std::string text = driver_error_text(result);
  return fail(std::move(report), CudaStatus::DriverInitFailed,
              returned + (text.empty() ? "" : ": " + text) + "; check the driver installation (nvidia-smi)");
}

/// The NVRTC part of the probe: loaded, and its version gives the driver
/// version the kernels need. Returns false (and fills `report`) on failure.
bool probe_nvrtc(const AvailabilityProbe &probe, AvailabilityReport &report, int &nvrtc_major, int &nvrtc_minor) {
  LoadedLibrary<NvrtcSymbols> local;
  const LoadedLibrary<NvrtcSymbols> *nvrtc = &nvrtc_library();
  if (!probe.nvrtc_libraries.empty()) {
    local = load_nvrtc_library(probe.nvrtc_libraries);
    nvrtc = &local;
  }
  if (!nvrtc->loaded() || nvrtc->symbols.nvrtcVersion(&nvrtc_major, &nvrtc_minor) != NVRTC_SUCCESS) {
    report = fail(std::move(report), CudaStatus::NoNvrtc,
                  nvrtc->error + ": Kiln compiles its CUDA kernels with NVRTC from the CUDA 13 toolkit; install "
                                 "it (cuda-nvrtc-13) or put its lib64 folder on LD_LIBRARY_PATH");
    return false;
  }
  return true;
}

/// Driver version, NVRTC and devices, once cuInit succeeded.
AvailabilityReport probe_initialized(const AvailabilityProbe &probe, const DriverSymbols &cu,
                                     AvailabilityReport report) {
  check_driver(cu.cuDriverGetVersion(&report.driver_version), "cuDriverGetVersion");
  int nvrtc_major = 0, nvrtc_minor = 0;
  if (!probe_nvrtc(probe, report, nvrtc_major, nvrtc_minor))
    return report;
  report.required_driver_version = required_driver_version(nvrtc_major);
  if (report.driver_version < report.required_driver_version)
    return fail(std::move(report), CudaStatus::DriverTooOld,
                "the driver supports CUDA " + cuda_version_string(report.driver_version) + " (cuDriverGetVersion " +
                    std::to_string(report.driver_version) + ") but kernels compiled by NVRTC " +
                    std::to_string(nvrtc_major) + "." + std::to_string(nvrtc_minor) + " need a CUDA " +
                    cuda_version_string(report.required_driver_version) + " driver or newer; update the NVIDIA driver");
  int count = 0;
  check_driver(cu.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count <= 0)
    return fail(std::move(report), CudaStatus::NoDevice,
                "the driver initialized but reports 0 devices; check nvidia-smi and CUDA_VISIBLE_DEVICES");
  report.status = CudaStatus::Available;
  report.device_count = count;
  report.reason = "CUDA is available: driver " + cuda_version_string(report.driver_version) + ", " +
                  std::to_string(count) + (count == 1 ? " device" : " devices") + ", NVRTC " +
                  std::to_string(nvrtc_major) + "." + std::to_string(nvrtc_minor);
  return report;
}

AvailabilityReport probe_driver(const AvailabilityProbe &probe, const DriverLibrary &driver) {
  AvailabilityReport report;
  if (driver.failure == DriverLoadFailure::NoLibrary)
    return fail(std::move(report), CudaStatus::NoDriver,
                driver.error + ": the NVIDIA driver is not installed (or not on the library path); install it, "
                               "or run on the CPU");
  if (driver.failure == DriverLoadFailure::StubLibrary)
    return fail(std::move(report), CudaStatus::StubDriver, driver.error + kStubAdvice);
  if (!driver.loaded())
    return fail(std::move(report), CudaStatus::DriverTooOld,
                driver.error + ": Kiln needs a CUDA " + cuda_version_string(kCudaDriverApiVersion) +
                    "+ driver; update the NVIDIA driver");
  CUresult init = driver.symbols.cuInit(0);
  if (init != CUDA_SUCCESS)
    return init_failure(std::move(report), probe.driver_library, init);
  try {
    return probe_initialized(probe, driver.symbols, std::move(report));
  } catch (const CudaError &error) {
    return fail(AvailabilityReport{}, CudaStatus::DriverInitFailed, error.what());
  }
}

} // namespace

int required_driver_version(int nvrtc_major) { return nvrtc_major * 1000; }

AvailabilityReport probe_availability(const AvailabilityProbe &probe) {
  if (probe.driver_library == kDriverSoname)
    return probe_driver(probe, driver_library());
  DriverLibrary driver = load_driver_library(probe.driver_library);
  return probe_driver(probe, driver);
}

const AvailabilityReport &availability() {
  static const AvailabilityReport report = probe_availability();
  return report;
}

bool is_available() { return availability().available(); }
std::string availability_reason() { return availability().reason; }
int device_count() { return availability().device_count; }

} // namespace kiln::runtime::cuda
