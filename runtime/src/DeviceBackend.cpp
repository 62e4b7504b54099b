// The backend registry (DeviceBackend.h).
#include "kiln/runtime/DeviceBackend.h"

#include "kiln/runtime/cuda/CudaBackend.h"

#include <array>
#include <mutex>

namespace kiln::runtime {
namespace {

struct Registry {
  std::mutex mu;
  std::array<std::shared_ptr<DeviceBackend>, kNumDeviceTypes> backends;
};

Registry &registry() {
  static Registry *r = [] {
    auto *reg = new Registry; // never destroyed: backends outlive static destructors
    reg->backends[static_cast<size_t>(DeviceType::CPU)] = cpu_backend();
    return reg;
  }();
  return *r;
}

} // namespace

DeviceBackend *registered_backend(DeviceType type) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.backends[static_cast<size_t>(type)].get();
}

DeviceBackend *find_backend(DeviceType type) {
  if (DeviceBackend *b = registered_backend(type))
    return b;
  return type == DeviceType::CUDA ? cuda::ensure_cuda_backend() : nullptr;
}

std::string backend_unavailable_reason(DeviceType type) {
  if (find_backend(type))
    return "";
  if (type != DeviceType::CUDA)
    return std::string("no backend is registered for ") + device_type_name(type);
  std::string why;
  cuda::ensure_cuda_backend(&why);
  return why;
}

std::shared_ptr<DeviceBackend> register_backend(std::shared_ptr<DeviceBackend> backend) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto &slot = r.backends[static_cast<size_t>(backend->type())];
  std::shared_ptr<DeviceBackend> previous = std::move(slot);
  slot = std::move(backend);
  return previous;
}

std::shared_ptr<DeviceBackend> unregister_backend(DeviceType type) {
  if (type == DeviceType::CPU)
    return nullptr;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return std::move(r.backends[static_cast<size_t>(type)]);
}

} // namespace kiln::runtime
