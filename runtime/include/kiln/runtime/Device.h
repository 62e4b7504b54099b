// kiln/runtime/Device.h - where memory lives and kernels run.
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

/// Device kinds. CUDA is a slot for the GPU backend: the CPU build knows the
/// name so errors can say "expected cpu, got cuda:0".
enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };

/// A device: type plus index (always 0 for CPU). Mirrors torch::Device.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device &o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device &o) const { return !(*this == o); }
  /// "cpu" or "cuda:N".
  std::string str() const;
};

constexpr Device kCPU{DeviceType::CPU, 0};

}  // namespace kiln
