// The CUDA-on-CPU simulator as a DeviceApi (kiln/runtime/cuda/CudaBackend.h,
// make_simulator_device): memory is host memory between guard pages
// (sim/SimMemory.h), kernels are the same CUDA C host-compiled and run as a
// grid (sim/HostModule.h, sim/Grid.h), streams run their work inline (so a
// recorded event has always completed), GEMM and convolution fall back to
// the CPU's (CudaBackend, host_accessible). Everything above this class
// (the caching allocators, streams, events, the emitter's kernels) is the
// code a GPU runs.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/sim/Grid.h"
#include "kiln/runtime/sim/HostModule.h"
#include "kiln/runtime/sim/SimMemory.h"

namespace kiln::runtime::cuda {
namespace {

/// The simulated device's memory unless $KILN_SIM_MEMORY_MB says otherwise:
/// 8 GiB, enough for the test models, small enough that a runaway
/// allocation fails with the caching allocator's OOM message, not the
/// host's OOM killer.
constexpr size_t kDefaultSimMemoryBytes = size_t{8} << 30;
/// An H200's streaming multiprocessors (launch heuristics read it).
constexpr int kH200Multiprocessors = 132;
/// Shared memory per block with the opt-in on sm_90 (227 KiB).
constexpr size_t kSm90MaxSharedBytes = 227 * 1024;

size_t sim_memory_bytes() {
  const char *mb = std::getenv("KILN_SIM_MEMORY_MB");
  if (mb && *mb) {
    char *end = nullptr;
    const unsigned long long v = std::strtoull(mb, &end, 10);
    if (end && *end == '\0' && v > 0)
      return static_cast<size_t>(v) << 20;
  }
  return kDefaultSimMemoryBytes;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class SimDevice final : public DeviceApi {
public:
  explicit SimDevice(int index) : index_(index), capacity_(sim_memory_bytes()) {}

  DeviceProperties properties() const override {
    DeviceProperties p;
    p.name = "CUDA simulator " + std::to_string(index_) + " (sm_90 on the CPU)";
    p.major = 9;
    p.minor = 0;
    p.total_memory_bytes = capacity_;
    p.multiprocessors = kH200Multiprocessors;
    p.max_shared_bytes_per_block = kSm90MaxSharedBytes;
    p.host_accessible = true;
    return p;
  }

  // ---- memory: guard-paged host memory, bounded like a device's --------------
  void *raw_allocate(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (nbytes > capacity_ - used_)
      return nullptr;  // the device is full: the caching allocator frees its cache and retries
    void *p = sim::allocate(nbytes, "cuda:" + std::to_string(index_) + " segment");
    used_ += nbytes;
    sizes_[p] = nbytes;
    return p;
  }
  void raw_free(void *ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(ptr);
    if (it == sizes_.end())
      throw std::invalid_argument("cuda simulator: raw_free of a pointer it did not allocate");
    used_ -= it->second;
    sizes_.erase(it);
    sim::deallocate(ptr);
  }
  DeviceMemoryInfo mem_get_info() override {
    std::lock_guard<std::mutex> lock(mu_);
    return {capacity_ - used_, capacity_};
  }
  void *host_allocate(size_t nbytes) override { return std::aligned_alloc(64, (nbytes + 63) / 64 * 64); }
  void host_free(void *ptr) override { std::free(ptr); }

  // ---- events and streams: work runs inline, so every event has completed ----
  EventHandle event_create() override { return timed_event_create(); }
  EventHandle timed_event_create() override {
    std::lock_guard<std::mutex> lock(mu_);
    event_times_[++last_handle_] = 0;
    return last_handle_;
  }
  void event_record(EventHandle event, StreamHandle) override {
    std::lock_guard<std::mutex> lock(mu_);
    event_times_.at(event) = now_seconds();
  }
  bool event_query(EventHandle) override { return true; }
  void event_synchronize(EventHandle) override {}
  void event_destroy(EventHandle event) override {
    std::lock_guard<std::mutex> lock(mu_);
    event_times_.erase(event);
  }
  double event_elapsed_seconds(EventHandle start, EventHandle end) override {
    std::lock_guard<std::mutex> lock(mu_);
    return event_times_.at(end) - event_times_.at(start);
  }
  StreamHandle stream_create() override {
    std::lock_guard<std::mutex> lock(mu_);
    return ++last_handle_;
  }
  void stream_destroy(StreamHandle) override {}
  void stream_synchronize(StreamHandle) override {}
  void stream_wait_event(StreamHandle, EventHandle) override {}

  // ---- copies and kernels ----------------------------------------------------
  void memcpy_async(void *dst, const void *src, size_t nbytes, CopyKind, StreamHandle) override {
    std::memmove(dst, src, nbytes);
  }
  void memset_async(void *dst, uint8_t value, size_t nbytes, StreamHandle) override {
    std::memset(dst, value, nbytes);
  }
  std::vector<KernelFunction> load_kernels(const std::string &source,
                                           const std::vector<std::string> &kernel_names) override {
    std::shared_ptr<const sim::HostModule> module = sim::load_module(source);
    std::vector<KernelFunction> out;
    for (const std::string &name : kernel_names) {
      auto kernel = std::make_shared<const sim::HostKernel>(module->kernel(name));
      out.push_back(KernelFunction{name, kernel.get(), kernel});
    }
    return out;
  }
  void launch_kernel(const KernelFunction &fn, Dim3 grid, Dim3 block, size_t shared_bytes, StreamHandle,
                     void **args) override {
    const auto &kernel = *static_cast<const sim::HostKernel *>(fn.handle);
    sim::launch(kernel, sim::Dim3{grid.x, grid.y, grid.z}, sim::Dim3{block.x, block.y, block.z}, shared_bytes,
                args);
  }

private:
  int index_;
  size_t capacity_;
  std::mutex mu_;
  size_t used_ = 0;
  std::map<void *, size_t> sizes_;
  std::map<EventHandle, double> event_times_;
  uintptr_t last_handle_ = 0;
};

} // namespace

std::shared_ptr<DeviceApi> make_simulator_device(int index) { return std::make_shared<SimDevice>(index); }

} // namespace kiln::runtime::cuda
