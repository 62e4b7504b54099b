// kiln/runtime/cuda/Availability.h - is CUDA usable in this process, and if
// not, which piece is missing (torch.cuda.is_available(), with the reason).
//
//   if (!kiln::runtime::cuda::is_available())
//     std::puts(kiln::runtime::cuda::availability_reason().c_str());
//     // "CUDA is not available: cannot load libcuda.so.1 (...): ..."
//
// Nothing here throws and nothing is linked: the driver (libcuda.so.1) and
// NVRTC (libnvrtc.so.13) are dlopen'ed on the first call (runtime/README.md,
// "Decisions": why dlopen).
#pragma once

#include <string>
#include <vector>

namespace kiln::runtime::cuda {

/// What the probe found, in the order it checks.
enum class CudaStatus {
  Available,
  NoDriver,         ///< dlopen("libcuda.so.1") failed: no NVIDIA driver
  DriverTooOld,     ///< no cuGetProcAddress_v2, entry points missing at 12.0, or
                    ///< cuDriverGetVersion below what the kernels need
  StubDriver,       ///< cuInit returned CUDA_ERROR_STUB_LIBRARY (34): the toolkit's stub
  NoDevice,         ///< cuInit returned CUDA_ERROR_NO_DEVICE (100), or 0 devices
  DriverInitFailed, ///< cuInit returned another error
  NoNvrtc,          ///< dlopen("libnvrtc.so.13") failed (or lacks entry points)
};

/// The probe's result.
struct AvailabilityReport {
  CudaStatus status = CudaStatus::NoDriver;
  /// One sentence naming the missing piece and what to do, or when available
  /// "CUDA is available: driver 13.0, 1 device, NVRTC 13.0".
  std::string reason;
  int driver_version = 0;          ///< cuDriverGetVersion (13000 = CUDA 13.0); 0 when not reached
  int required_driver_version = 0; ///< what the kernels need (see required_driver_version())
  int device_count = 0;            ///< cuDeviceGetCount; 0 unless available
  int init_result = 0;             ///< cuInit's CUresult; 0 when not called or success
  bool available() const { return status == CudaStatus::Available; }
};

/// What probe_availability() loads (defaults: the real libraries).
struct AvailabilityProbe {
  std::string driver_library = "libcuda.so.1";
  /// Empty: libnvrtc.so.13, then $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
  std::vector<std::string> nvrtc_libraries;
};

/// The lowest cuDriverGetVersion that runs what NVRTC `nvrtc_major`.x
/// compiles: `nvrtc_major * 1000` (a CUBIN from a CUDA 13 toolkit needs a
/// CUDA 13 driver; within a major, CUDA's minor version compatibility lets
/// an older 13.x driver load it; PTX JIT needs the full NVRTC version, which
/// the module loader checks when it loads PTX).
int required_driver_version(int nvrtc_major);

/// Probes from scratch (loads the libraries named by `probe` and calls
/// cuInit): for tests with a fake driver and for diagnostics. The process's
/// own answer is availability(), computed once.
AvailabilityReport probe_availability(const AvailabilityProbe &probe = {});

/// The process's probe of the real libraries, made on the first call
/// (thread-safe), the same object afterwards.
const AvailabilityReport &availability();

/// availability().available(): a driver, a device and NVRTC are all usable.
bool is_available();
/// availability().reason.
std::string availability_reason();
/// The number of CUDA devices; 0 when CUDA is not available.
int device_count();

} // namespace kiln::runtime::cuda
