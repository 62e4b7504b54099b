// The CUDA DeviceBackend (runtime/src/cuda/CudaBackend.cpp) over a
// host-memory DeviceApi that records what it is asked to do: copies go in
// the direction the devices say, buffers come from the caching allocator
// (PyTorch's segment sizes), streams and events map to the device's, and
// GEMM/strided copies fall back to the CPU on a host-accessible device only
// (GEMMs elsewhere go to cuBLASLt).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/runtime/cuda/Availability.h"
#include "kiln/runtime/cuda/CachingAllocator.h"
#include "kiln/runtime/cuda/CudaBackend.h"

namespace kiln::runtime::cuda {
namespace {

/// Host memory as device memory; streams run work inline; events keep the
/// host time they were recorded at. Counts the calls the backend makes.
class HostDevice final : public DeviceApi {
public:
  explicit HostDevice(bool host_accessible) : host_accessible_(host_accessible) {}
  DeviceProperties properties() const override {
    DeviceProperties p;
    p.name = "host test device";
    p.major = 9;
    p.total_memory_bytes = size_t{1} << 30;
    p.host_accessible = host_accessible_;
    return p;
  }
  void *raw_allocate(size_t nbytes) override {
    ++raw_allocs;
    return std::aligned_alloc(256, (nbytes + 255) / 256 * 256);
  }
  void raw_free(void *ptr) override { std::free(ptr); }
  DeviceMemoryInfo mem_get_info() override { return {size_t{1} << 29, size_t{1} << 30}; }
  void *host_allocate(size_t nbytes) override { return std::aligned_alloc(64, (nbytes + 63) / 64 * 64); }
  void host_free(void *ptr) override { std::free(ptr); }
  EventHandle event_create() override { return timed_event_create(); }
  EventHandle timed_event_create() override {
    std::lock_guard<std::mutex> lock(mu_);
    times_[++next_event_] = 0;
    return next_event_;
  }
  void event_record(EventHandle e, StreamHandle) override {
    std::lock_guard<std::mutex> lock(mu_);
    times_[e] = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  bool event_query(EventHandle) override { return true; }
  void event_synchronize(EventHandle) override {}
  void event_destroy(EventHandle e) override {
    std::lock_guard<std::mutex> lock(mu_);
    times_.erase(e);
  }
  double event_elapsed_seconds(EventHandle start, EventHandle end) override {
    std::lock_guard<std::mutex> lock(mu_);
    return times_.at(end) - times_.at(start);
  }
  StreamHandle stream_create() override { return ++streams_created; }
  void stream_destroy(StreamHandle) override { ++streams_destroyed; }
  void stream_synchronize(StreamHandle) override { ++syncs; }
  void stream_wait_event(StreamHandle, EventHandle) override { ++waits; }
  void memcpy_async(void *dst, const void *src, size_t nbytes, CopyKind kind, StreamHandle stream) override {
    copies.push_back({kind, stream});
    std::memcpy(dst, src, nbytes);
  }
  void memset_async(void *dst, uint8_t value, size_t nbytes, StreamHandle) override { std::memset(dst, value, nbytes); }
  std::vector<KernelFunction> load_kernels(const std::string &, const std::vector<std::string> &) override {
    throw std::runtime_error("host test device: no kernels");
  }
  void launch_kernel(const KernelFunction &, Dim3, Dim3, size_t, StreamHandle, void **) override {
    throw std::runtime_error("host test device: no kernels");
  }

  struct Copy {
    CopyKind kind;
    StreamHandle stream;
  };
  std::vector<Copy> copies;
  int raw_allocs = 0, syncs = 0, waits = 0, streams_destroyed = 0;
  StreamHandle streams_created = 100;

private:
  bool host_accessible_;
  std::mutex mu_;
  std::map<EventHandle, double> times_;
  EventHandle next_event_ = 0;
};

struct Fixture {
  std::shared_ptr<HostDevice> dev;
  std::shared_ptr<DeviceBackend> backend;
  explicit Fixture(bool host_accessible = true) : dev(std::make_shared<HostDevice>(host_accessible)) {
    backend = make_cuda_backend({dev});
  }
};

TEST(CudaBackend, BuffersComeFromTheCachingAllocator) {
  Fixture f;
  EXPECT_EQ(f.backend->type(), DeviceType::CUDA);
  EXPECT_EQ(f.backend->device_count(), 1);
  Allocator &alloc = f.backend->allocator(0);
  EXPECT_EQ(alloc.device(), Device(DeviceType::CUDA, 0));
  {
    auto a = Buffer::make(1000, alloc), b = Buffer::make(3000, alloc);
    EXPECT_EQ(a->device(), Device(DeviceType::CUDA, 0));
    // Both small requests share one 2 MiB segment (PyTorch's kSmallBuffer).
    EXPECT_EQ(f.dev->raw_allocs, 1);
    auto *ca = dynamic_cast<CachingAllocator *>(&alloc);
    ASSERT_NE(ca, nullptr);
    EXPECT_EQ(ca->memory_stats().reserved_bytes.all.current, int64_t{2} << 20);
  }
  EXPECT_EQ(alloc.stats().current_bytes, 0);
}

TEST(CudaBackend, CopiesGoTheWayTheDevicesSay) {
  Fixture f;
  std::vector<float> host(64), back(64, -1.0f);
  std::iota(host.begin(), host.end(), 0.0f);
  auto d0 = Buffer::make(256, f.backend->allocator(0)), d1 = Buffer::make(256, f.backend->allocator(0));
  const Device cuda(DeviceType::CUDA, 0);
  f.backend->copy(d0->data(), cuda, host.data(), kCPU, 256);
  f.backend->copy(d1->data(), cuda, d0->data(), cuda, 256);
  f.backend->copy(back.data(), kCPU, d1->data(), cuda, 256);
  EXPECT_EQ(back, host);
  ASSERT_EQ(f.dev->copies.size(), 3u);
  EXPECT_EQ(f.dev->copies[0].kind, CopyKind::HostToDevice);
  EXPECT_EQ(f.dev->copies[1].kind, CopyKind::DeviceToDevice);
  EXPECT_EQ(f.dev->copies[2].kind, CopyKind::DeviceToHost);
  EXPECT_EQ(f.dev->copies[0].stream, kDefaultStream);
  EXPECT_EQ(f.dev->syncs, 3);  // copy() is synchronous
}

TEST(CudaBackend, StreamsAndEventsMapToTheDevice) {
  Fixture f;
  {
    auto s = f.backend->create_stream(0);
    EXPECT_EQ(s->device(), Device(DeviceType::CUDA, 0));
    EXPECT_EQ(stream_handle(*s), 101u);
    float x = 1, y = 0;
    f.backend->copy_async(&y, kCPU, &x, Device(DeviceType::CUDA, 0), sizeof(float), *s);
    EXPECT_EQ(f.dev->copies.back().stream, 101u);
    auto start = f.backend->create_event(0), end = f.backend->create_event(0);
    start->record(*s);
    end->record(*s);
    end->wait(f.backend->default_stream(0));
    EXPECT_EQ(f.dev->waits, 1);
    EXPECT_TRUE(end->query());
    EXPECT_GE(end->elapsed_seconds(*start), 0.0);
  }
  EXPECT_EQ(f.dev->streams_destroyed, 1);
  Stream &cpu = cpu_backend()->default_stream(0);
  EXPECT_THROW(stream_handle(cpu), std::invalid_argument);
  EXPECT_THROW(f.backend->allocator(1), std::out_of_range);
}

// A host-accessible device (the simulator) runs GEMMs on the CPU; any other
// goes to cuBLASLt and never silently to the CPU. Without a GPU, cuBLASLt
// cannot start (no library, or cublasLtCreate's NOT_INITIALIZED), so the
// error names it; with a GPU this fake device's host memory is no place to
// run cuBLASLt, and that half is left to the real-device tests.
TEST(CudaBackend, GemmRunsOnTheCpuOnlyOnAHostAccessibleDeviceElseOnCublasLt) {
  for (bool host_accessible : {true, false}) {
    if (!host_accessible && is_available())
      continue;
    Fixture f(host_accessible);
    auto buf = Buffer::make(12 * sizeof(float), f.backend->allocator(0));
    auto *p = static_cast<float *>(buf->data());
    for (int i = 0; i < 12; ++i) p[i] = 1.0f;
    TensorView a{buf, 0, {2, 2}, {2, 1}, DType::Float32}, b{buf, 4, {2, 2}, {2, 1}, DType::Float32},
        c{buf, 8, {2, 2}, {2, 1}, DType::Float32};
    Stream &s = f.backend->default_stream(0);
    if (host_accessible) {
      f.backend->gemm(a, b, c, s);
      EXPECT_EQ(p[8], 2.0f);  // [1 1; 1 1] x [1 1; 1 1] = 2 everywhere
      EXPECT_EQ(p[11], 2.0f);
    } else {
      try {
        f.backend->gemm(a, b, c, s);
        ADD_FAILURE() << "gemm ran on a device that is not host accessible, without a GPU";
      } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("cublasLt"), std::string::npos) << e.what();
      }
      EXPECT_EQ(p[8], 1.0f) << "the product was computed on the cpu";
    }
  }
}

TEST(CudaBackend, NeedsADevice) { EXPECT_THROW(make_cuda_backend({}), std::invalid_argument); }

} // namespace
} // namespace kiln::runtime::cuda
