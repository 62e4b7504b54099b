// Which CUDA backend a process gets (kiln/runtime/cuda/CudaBackend.h,
// ensure_cuda_backend): the simulator when KILN_CUDA_SIM=1, else the GPUs
// the driver reports when CUDA is available, else none, with the
// availability probe's reason (what is missing and what to do).
#include <cstdlib>
#include <mutex>
#include <string>

#include "DriverLibrary.h"
#include "kiln/runtime/cuda/Availability.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/Nvrtc.h"

namespace kiln::runtime::cuda {
namespace {

/// Simulated devices unless $KILN_SIM_DEVICES says otherwise (DDP tests
/// ask for more).
constexpr int kDefaultSimDevices = 1;
/// An upper bound on $KILN_SIM_DEVICES (CurrentStream's table size).
constexpr int kMaxSimDevices = 64;

bool simulator_requested() {
  const char *v = std::getenv("KILN_CUDA_SIM");
  return v && std::string(v) == "1";
}

int simulated_device_count() {
  const char *v = std::getenv("KILN_SIM_DEVICES");
  if (!v || !*v)
    return kDefaultSimDevices;
  const int n = std::atoi(v);
  return n >= 1 && n <= kMaxSimDevices ? n : kDefaultSimDevices;
}

std::shared_ptr<DeviceBackend> make_simulator_backend() {
  std::vector<std::shared_ptr<DeviceApi>> devices;
  for (int i = 0; i < simulated_device_count(); ++i)
    devices.push_back(make_simulator_device(i));
  return make_cuda_backend(std::move(devices));
}

std::shared_ptr<DeviceBackend> make_driver_backend() {
  std::vector<std::shared_ptr<DeviceApi>> devices;
  for (int i = 0; i < device_count(); ++i)
    devices.push_back(make_driver_device(driver(), i, default_nvrtc_compiler()));
  return make_cuda_backend(std::move(devices));
}

} // namespace

DeviceBackend *ensure_cuda_backend(std::string *why_not) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (DeviceBackend *b = registered_backend(DeviceType::CUDA))
    return b;
  if (simulator_requested()) {
    register_backend(make_simulator_backend());
    return registered_backend(DeviceType::CUDA);
  }
  if (is_available()) {
    register_backend(make_driver_backend());
    return registered_backend(DeviceType::CUDA);
  }
  if (why_not)
    *why_not = availability_reason() + " (or set KILN_CUDA_SIM=1 to run CUDA code on the CUDA-on-CPU simulator)";
  return nullptr;
}

} // namespace kiln::runtime::cuda
