// The checking PrivateUse1 backend (CheckingBackend.h).
#include "CheckingBackend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace kiln::testing {

using runtime::MemoryStats;
using runtime::TensorView;

// ---- CheckingAllocator -----------------------------------------------------------

CheckingAllocator::~CheckingAllocator() {
  for (auto [ptr, bytes] : quarantine_)
    std::free(ptr);
}

void *CheckingAllocator::allocate(size_t nbytes) {
  const size_t rounded = std::max<size_t>((nbytes + kAlignment - 1) / kAlignment * kAlignment, kAlignment);
  void *p = std::aligned_alloc(kAlignment, rounded);
  if (!p)
    throw std::bad_alloc();
  std::memset(p, kPoison, rounded); // uninitialized reads show as NaN
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.current_bytes += static_cast<int64_t>(nbytes);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  ++stats_.num_allocs;
  return p;
}

void CheckingAllocator::deallocate(void *ptr, size_t nbytes) {
  if (!ptr)
    return;
  std::memset(ptr, kPoison, nbytes); // reads after free show as NaN
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.current_bytes -= static_cast<int64_t>(nbytes);
  quarantine_.emplace_back(ptr, nbytes);
  quarantined_ += static_cast<int64_t>(nbytes);
  while (quarantined_ > kQuarantineBytes && !quarantine_.empty()) {
    quarantined_ -= static_cast<int64_t>(quarantine_.front().second);
    std::free(quarantine_.front().first);
    quarantine_.pop_front();
  }
}

MemoryStats CheckingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CheckingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
}

// ---- CheckingBackend -------------------------------------------------------------

namespace {

/// Work runs inline (forwarded to the CPU): nothing is ever pending.
class CheckingStream final : public runtime::Stream {
public:
  explicit CheckingStream(Device device) : device_(device) {}
  Device device() const override { return device_; }
  void synchronize() override {}

private:
  Device device_;
};

} // namespace

CheckingBackend::CheckingBackend(int device_count) : cpu_(runtime::cpu_backend()) {
  for (int i = 0; i < device_count; ++i) {
    allocators_.push_back(std::make_unique<CheckingAllocator>(i));
    streams_.push_back(std::make_unique<CheckingStream>(Device(DeviceType::PrivateUse1, i)));
  }
}

void CheckingBackend::expect_here(const TensorView &v, const char *what) const {
  if (!v.buffer)
    throw std::runtime_error(std::string("checking backend: ") + what + " has no buffer");
  const Device d = v.buffer->device();
  if (d.type != DeviceType::PrivateUse1 || d.index < 0 || d.index >= device_count())
    throw std::runtime_error(std::string("checking backend: ") + what + " is on " + d.str() +
                             ", expected a privateuse1 device");
}

void CheckingBackend::copy(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes) {
  ++copies_;
  cpu_->copy(dst, kCPU, src, kCPU, nbytes);
}

runtime::Stream &CheckingBackend::default_stream(int index) { return *streams_.at(index); }

std::unique_ptr<runtime::Stream> CheckingBackend::create_stream(int index) {
  return std::make_unique<CheckingStream>(Device(DeviceType::PrivateUse1, index));
}

std::unique_ptr<runtime::Event> CheckingBackend::create_event(int) { return cpu_->create_event(0); }

void CheckingBackend::copy_async(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes,
                                 runtime::Stream &) {
  copy(dst, dst_device, src, src_device, nbytes);
}

void CheckingBackend::copy_to_contiguous(const TensorView &src, void *dst, runtime::Stream &) {
  expect_here(src, "copy source");
  ++copies_;
  cpu_->copy_to_contiguous(src, dst, cpu_->default_stream(0));
}

void CheckingBackend::launch(const runtime::KernelHandle &kernel, const runtime::KernelArgs &args, runtime::Stream &) {
  for (const TensorView *v : args.operands)
    expect_here(*v, "kernel operand");
  for (const TensorView *v : args.results)
    expect_here(*v, "kernel result");
  ++launches_;
  cpu_->launch(kernel, args, cpu_->default_stream(0));
}

void CheckingBackend::gemm(const TensorView &a, const TensorView &b, const TensorView &c, runtime::Stream &) {
  expect_here(a, "gemm operand a");
  expect_here(b, "gemm operand b");
  expect_here(c, "gemm result");
  ++gemms_;
  cpu_->gemm(a, b, c, cpu_->default_stream(0));
}

void CheckingBackend::conv2d(runtime::ConvOp op, const runtime::Conv2dParams &p, const TensorView &a,
                             const TensorView &b, const TensorView &out, runtime::Stream &) {
  expect_here(a, "conv2d operand a");
  expect_here(b, "conv2d operand b");
  expect_here(out, "conv2d result");
  ++convs_;
  cpu_->conv2d(op, p, a, b, out, cpu_->default_stream(0));
}

void CheckingBackend::max_pool2d(runtime::MaxPoolOp op, const runtime::Pool2dParams &p, const TensorView &a,
                                 const TensorView &indices, const TensorView &values, runtime::Stream &) {
  expect_here(a, "max_pool2d operand");
  if (indices.buffer)
    expect_here(indices, "max_pool2d indices");
  if (values.buffer)
    expect_here(values, "max_pool2d values");
  ++convs_;
  cpu_->max_pool2d(op, p, a, indices, values, cpu_->default_stream(0));
}

int64_t CheckingBackend::allocations() const {
  int64_t n = 0;
  for (const auto &a : allocators_)
    n += a->stats().num_allocs;
  return n;
}

void CheckingBackend::reset_counts() {
  launches_ = 0;
  gemms_ = 0;
  convs_ = 0;
  copies_ = 0;
}

// ---- install / uninstall ---------------------------------------------------------

namespace {
std::mutex install_mutex;
std::shared_ptr<runtime::DeviceBackend> replaced; ///< what install_checking_backend replaced
} // namespace

std::shared_ptr<CheckingBackend> install_checking_backend(int device_count) {
  auto backend = std::make_shared<CheckingBackend>(device_count);
  std::lock_guard<std::mutex> lock(install_mutex);
  std::shared_ptr<runtime::DeviceBackend> previous = runtime::register_backend(backend);
  if (!std::dynamic_pointer_cast<CheckingBackend>(previous))
    replaced = std::move(previous); // keep the first non-checking one
  return backend;
}

void uninstall_checking_backend() {
  std::lock_guard<std::mutex> lock(install_mutex);
  if (replaced)
    runtime::register_backend(std::move(replaced));
  else
    runtime::unregister_backend(DeviceType::PrivateUse1);
  replaced.reset();
}

} // namespace kiln::testing
