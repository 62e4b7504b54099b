// The CPU DeviceBackend: the process-wide CPU allocator and memcpy.
#include <cstring>

#include "kiln/runtime/DeviceBackend.h"

namespace kiln::runtime {
namespace {

class CpuBackend final : public DeviceBackend {
public:
  DeviceType type() const override { return DeviceType::CPU; }
  int device_count() const override { return 1; }
  Allocator &allocator(int) override { return cpu_allocator(); }
  bool host_accessible() const override { return true; }
  void copy(void *dst, Device, const void *src, Device, size_t nbytes) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
};

} // namespace

std::shared_ptr<DeviceBackend> cpu_backend() {
  static std::shared_ptr<DeviceBackend> backend = std::make_shared<CpuBackend>();
  return backend;
}

} // namespace kiln::runtime
