// checking_device.h - a second DeviceBackend for tests: a "checking" CPU
// device registered as DeviceType::PrivateUse1. Its memory is host memory
// (host_accessible, so the CPU kernels run on it), from an allocator of its
// own that counts allocations and poisons freed memory (0xCD bytes), so a
// kernel that reads a freed buffer sees garbage, and a result that leaks from
// the CPU allocator is caught by the device check.
//
//   auto dev = testing::install_checking_device();   // registers it and the CPU kernels for it
//   Tensor x = ones({2, 3}, kFloat32, testing::kChecking);
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kiln/runtime/DeviceBackend.h"
#include "ops/dispatch.h"

namespace kiln::testing {

constexpr Device kChecking{DeviceType::PrivateUse1, 0};

/// Byte written over freed memory.
constexpr unsigned char kPoison = 0xCD;

class CheckingAllocator final : public runtime::Allocator {
public:
  void *allocate(size_t nbytes) override {
    void *p = std::aligned_alloc(64, round_up(nbytes));
    std::memset(p, kPoison, round_up(nbytes));  // uninitialized memory is poison too
    ++allocs;
    live_bytes += static_cast<int64_t>(nbytes);
    return p;
  }
  void deallocate(void *ptr, size_t nbytes) override {
    std::memset(ptr, kPoison, round_up(nbytes));
    std::free(ptr);
    ++frees;
    live_bytes -= static_cast<int64_t>(nbytes);
  }
  Device device() const override { return kChecking; }
  size_t alignment() const override { return 64; }
  runtime::MemoryStats stats() const override {
    runtime::MemoryStats s;
    s.current_bytes = live_bytes;
    s.num_allocs = allocs;
    return s;
  }
  void reset_peak_stats() override {}

  std::atomic<int64_t> allocs{0}, frees{0}, live_bytes{0};

private:
  static size_t round_up(size_t n) { return (n + 63) / 64 * 64 + 64; }
};

class CheckingBackend final : public runtime::DeviceBackend {
public:
  DeviceType type() const override { return DeviceType::PrivateUse1; }
  int device_count() const override { return 1; }
  runtime::Allocator &allocator(int) override { return alloc; }
  bool host_accessible() const override { return true; }
  void copy(void *dst, Device, const void *src, Device, size_t nbytes) override {
    ++copies;
    if (nbytes) std::memcpy(dst, src, nbytes);
  }

  CheckingAllocator alloc;
  std::atomic<int64_t> copies{0};
};

/// Registers a CheckingBackend for PrivateUse1 (once per process) and the CPU
/// kernels for it; returns it.
inline std::shared_ptr<CheckingBackend> install_checking_device() {
  static std::shared_ptr<CheckingBackend> backend = [] {
    auto b = std::make_shared<CheckingBackend>();
    runtime::register_backend(b);
    return b;
  }();
  dispatch::register_cpu_kernels_for(DeviceType::PrivateUse1);
  return backend;
}

}  // namespace kiln::testing
