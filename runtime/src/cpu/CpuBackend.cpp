// The CPU DeviceBackend: the process-wide CPU allocator, memcpy, inline
// streams and events, and the work functions of CpuWork.cpp.
#include <chrono>
#include <cstring>

#include "CpuWork.h"
#include "kiln/runtime/DeviceBackend.h"

namespace kiln::runtime {
namespace {

/// Work runs inline when enqueued: nothing is ever pending.
class CpuStream final : public Stream {
public:
  Device device() const override { return kCPU; }
  void synchronize() override {}
};

/// Completed when recorded; keeps the time of its record().
class CpuEvent final : public Event {
public:
  void record(Stream &) override {
    at_ = std::chrono::steady_clock::now();
    recorded_ = true;
  }
  void wait(Stream &) override {}
  void synchronize() override {}
  bool query() const override { return true; }
  double elapsed_seconds(const Event &start) const override {
    const auto *s = dynamic_cast<const CpuEvent *>(&start);
    if (!s || !s->recorded_ || !recorded_)
      return 0.0;
    return std::chrono::duration<double>(at_ - s->at_).count();
  }

private:
  std::chrono::steady_clock::time_point at_{};
  bool recorded_ = false;
};

class CpuBackend final : public DeviceBackend {
public:
  DeviceType type() const override { return DeviceType::CPU; }
  int device_count() const override { return 1; }
  Allocator &allocator(int) override { return cpu_allocator(); }
  bool host_accessible() const override { return true; }
  void copy(void *dst, Device, const void *src, Device, size_t nbytes) override {
    if (nbytes)
      std::memcpy(dst, src, nbytes);
  }

  Stream &default_stream(int) override { return stream_; }
  std::unique_ptr<Stream> create_stream(int) override { return std::make_unique<CpuStream>(); }
  std::unique_ptr<Event> create_event(int) override { return std::make_unique<CpuEvent>(); }

  void copy_async(void *dst, Device dst_device, const void *src, Device src_device, size_t nbytes,
                  Stream &) override {
    copy(dst, dst_device, src, src_device, nbytes);
  }
  void copy_to_contiguous(const TensorView &src, void *dst, Stream &) override { cpu::copy_to_contiguous(src, dst); }
  void launch(const KernelHandle &kernel, const KernelArgs &args, Stream &) override {
    cpu::launch_kernel(kernel, args);
  }
  void gemm(const TensorView &a, const TensorView &b, const TensorView &c, Stream &) override { cpu::gemm(a, b, c); }
  void conv2d(ConvOp op, const Conv2dParams &p, const TensorView &a, const TensorView &b, const TensorView &out,
              Stream &) override {
    cpu::conv2d(op, p, a, b, out);
  }
  void max_pool2d(MaxPoolOp op, const Pool2dParams &p, const TensorView &a, const TensorView &indices,
                  const TensorView &values, Stream &) override {
    cpu::max_pool2d(op, p, a, indices, values);
  }

private:
  CpuStream stream_;
};

} // namespace

std::shared_ptr<DeviceBackend> cpu_backend() {
  static std::shared_ptr<DeviceBackend> backend = std::make_shared<CpuBackend>();
  return backend;
}

} // namespace kiln::runtime
