// kiln/runtime/DeviceBackend.h - what a device kind provides to every layer
// above it (IREE's HAL device, PyTorch's DeviceGuardImpl + allocator), and
// the registry that finds the backend of a Device.
//
// One backend serves one DeviceType (all its indices). The CPU backend is
// always registered; CUDA, the CUDA simulator and out-of-tree backends
// (DeviceType::PrivateUse1, e.g. a test's checking device) register
// themselves at start-up or on first use.
//
//   runtime::DeviceBackend *b = runtime::find_backend(DeviceType::CPU);
//   auto buf = runtime::Buffer::make(1024, b->allocator(0));
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/runtime/Allocator.h"
#include "kiln/runtime/Device.h"

namespace kiln::runtime {

class DeviceBackend {
public:
  virtual ~DeviceBackend() = default;
  /// The device kind this backend serves.
  virtual DeviceType type() const = 0;
  /// Number of devices of this kind (indices 0 .. count-1).
  virtual int device_count() const = 0;
  /// The allocator of device `index` (0 <= index < device_count(); the
  /// caller checks). Lives as long as the backend.
  virtual Allocator &allocator(int index) = 0;
  /// True when host code may read and write this backend's memory through
  /// plain pointers (the CPU, the CUDA simulator, a checking CPU device):
  /// host-side kernels may then run on it directly.
  virtual bool host_accessible() const = 0;
  /// Copies `nbytes` bytes from `src` on `src_device` to `dst` on
  /// `dst_device`; one of the two is this backend's, the other is this
  /// backend's or the CPU. Synchronous: the bytes are at `dst` on return.
  virtual void copy(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes) = 0;
};

/// The backend registered for `type`, or null when there is none (a kind
/// this build or this process does not serve). Thread-safe.
DeviceBackend *find_backend(DeviceType type);

/// Registers `backend` for its type(), replacing any earlier one (the CPU's
/// included: a test may wrap it). Returns the previous one (null if none)
/// so a caller can restore it. Thread-safe; backends already handed out by
/// find_backend() must stay alive while in use (callers keep the shared_ptr).
std::shared_ptr<DeviceBackend> register_backend(std::shared_ptr<DeviceBackend> backend);

/// The CPU backend: cpu_allocator(), memcpy. Always registered.
std::shared_ptr<DeviceBackend> cpu_backend();

}  // namespace kiln::runtime
