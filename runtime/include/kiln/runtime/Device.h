// kiln/runtime/Device.h - where memory lives and kernels run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

/// Device kinds. Each kind is served by one runtime::DeviceBackend
/// (kiln/runtime/DeviceBackend.h); a kind without a registered backend is a
/// name only, so errors can say "expected cpu, got cuda:0".
/// PrivateUse1 is PyTorch's slot for an out-of-tree backend: a program (or a
/// test) registers its own DeviceBackend for it.
enum class DeviceType : int8_t { CPU = 0, CUDA = 1, PrivateUse1 = 2 };

/// Number of DeviceType values (the size of per-device-type tables).
constexpr size_t kNumDeviceTypes = 3;

/// A device: type plus index (always 0 for CPU). Mirrors torch::Device.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool is_privateuse1() const { return type == DeviceType::PrivateUse1; }
  bool operator==(const Device &o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device &o) const { return !(*this == o); }
  /// "cpu", "cuda:N" or "privateuse1:N".
  std::string str() const;
};

constexpr Device kCPU{DeviceType::CPU, 0};

/// "cpu", "cuda", "privateuse1".
const char *device_type_name(DeviceType type);

}  // namespace kiln
