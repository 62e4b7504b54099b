// tests/support/CheckingBackend.h - a second device backend for tests: a
// "checking CPU device" registered for DeviceType::PrivateUse1.
//
// Its memory is host memory (host_accessible), so CPU kernels run on it, but
// it checks what the CPU cannot:
//   - the allocator fills fresh memory and freed memory with 0xFF bytes (a
//     float/double NaN, a bfloat16/half NaN), and keeps freed blocks in a
//     quarantine (up to kQuarantineBytes) before returning them, so a read
//     of uninitialized or freed memory shows up as NaN in results;
//   - every launch, GEMM and copy checks that the tensors it gets live on
//     this device (a CPU tensor reaching it throws std::runtime_error), then
//     counts itself and forwards to the CPU backend's implementation.
//
//   auto checking = kiln::testing::install_checking_backend();  // registers it
//   ... run things on Device(DeviceType::PrivateUse1, 0) ...
//   EXPECT_EQ(checking->launches(), 3);
//   kiln::testing::uninstall_checking_backend();                 // restores the previous one
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "kiln/runtime/DeviceBackend.h"

namespace kiln::testing {

/// The allocator of one checking device: 64-byte aligned host memory,
/// poisoned with 0xFF when handed out and when freed; current/peak/count
/// statistics like the CPU allocator's. Thread-safe.
class CheckingAllocator final : public runtime::Allocator {
public:
  static constexpr unsigned char kPoison = 0xFF;
  static constexpr size_t kAlignment = 64;
  /// Freed bytes kept poisoned (not returned to the system) at most.
  static constexpr int64_t kQuarantineBytes = 64 << 20;

  explicit CheckingAllocator(int index) : device_(DeviceType::PrivateUse1, index) {}
  ~CheckingAllocator() override;
  void *allocate(size_t nbytes) override;
  void deallocate(void *ptr, size_t nbytes) override;
  Device device() const override { return device_; }
  size_t alignment() const override { return kAlignment; }
  runtime::MemoryStats stats() const override;
  void reset_peak_stats() override;

private:
  Device device_;
  mutable std::mutex mutex_;
  runtime::MemoryStats stats_;
  std::deque<std::pair<void *, size_t>> quarantine_; ///< freed blocks, oldest first
  int64_t quarantined_ = 0;
};

/// The checking backend: `device_count` devices privateuse1:0 .. N-1.
class CheckingBackend final : public runtime::DeviceBackend {
public:
  explicit CheckingBackend(int device_count = 1);

  DeviceType type() const override { return DeviceType::PrivateUse1; }
  int device_count() const override { return static_cast<int>(allocators_.size()); }
  runtime::Allocator &allocator(int index) override { return *allocators_.at(index); }
  bool host_accessible() const override { return true; }
  void copy(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes) override;

  runtime::Stream &default_stream(int index) override;
  std::unique_ptr<runtime::Stream> create_stream(int index) override;
  std::unique_ptr<runtime::Event> create_event(int index) override;

  void copy_async(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes,
                  runtime::Stream &stream) override;
  void copy_to_contiguous(const runtime::TensorView &src, void *dst, runtime::Stream &stream) override;
  void launch(const runtime::KernelHandle &kernel, const runtime::KernelArgs &args, runtime::Stream &stream) override;
  void gemm(const runtime::TensorView &a, const runtime::TensorView &b, const runtime::TensorView &c,
            runtime::Stream &stream) override;
  void conv2d(runtime::ConvOp op, const runtime::Conv2dParams &p, const runtime::TensorView &a,
              const runtime::TensorView &b, const runtime::TensorView &out, runtime::Stream &stream) override;
  void max_pool2d(runtime::MaxPoolOp op, const runtime::Pool2dParams &p, const runtime::TensorView &a,
                  const runtime::TensorView &indices, const runtime::TensorView &values,
                  runtime::Stream &stream) override;

  /// Counters since construction or reset_counts().
  int64_t launches() const { return launches_.load(); }
  int64_t gemms() const { return gemms_.load(); }
  int64_t convs() const { return convs_.load(); } ///< conv2d and max_pool2d calls
  int64_t copies() const { return copies_.load(); } ///< copy, copy_async and copy_to_contiguous calls
  /// Allocations served by all of this backend's allocators (since start).
  int64_t allocations() const;
  void reset_counts();

private:
  /// Throws std::runtime_error naming `what` unless `v` lives on this backend.
  void expect_here(const runtime::TensorView &v, const char *what) const;

  std::vector<std::unique_ptr<CheckingAllocator>> allocators_;
  std::vector<std::unique_ptr<runtime::Stream>> streams_;
  std::shared_ptr<runtime::DeviceBackend> cpu_;
  std::atomic<int64_t> launches_{0}, gemms_{0}, copies_{0}, convs_{0};
};

/// Registers a fresh CheckingBackend for PrivateUse1 (keeping the previous
/// backend, if any, for uninstall_checking_backend) and returns it.
std::shared_ptr<CheckingBackend> install_checking_backend(int device_count = 1);
/// Puts back the backend install_checking_backend replaced.
void uninstall_checking_backend();

} // namespace kiln::testing
