// The CPU allocator: aligned_alloc with 64-byte alignment and byte counters,
// caching large freed blocks by exact size (Allocator.h).
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "kiln/runtime/Allocator.h"

namespace kiln::runtime {
namespace {

class CPUAllocator final : public Allocator {
public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kCacheMinBytes = 256 * 1024;

  CPUAllocator() {
    const char *env = std::getenv("KILN_CPU_CACHE_MB");
    cache_limit_ = static_cast<int64_t>(env ? std::strtoll(env, nullptr, 10) : 1024) * 1024 * 1024;
  }

  void *allocate(size_t nbytes) override {
    // aligned_alloc wants a multiple of the alignment; zero-size tensors still
    // get a valid, unique pointer.
    size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) rounded = kAlignment;
    void *p = nullptr;
    if (rounded >= kCacheMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_ -= static_cast<int64_t>(rounded);
        hits_.fetch_add(1);
      }
    }
    if (!p) p = std::aligned_alloc(kAlignment, rounded);
    if (!p) {
      empty_cache();  // give the cached blocks back and try once more
      p = std::aligned_alloc(kAlignment, rounded);
    }
    if (!p) throw std::bad_alloc();
    int64_t now = current_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    allocs_.fetch_add(1);
    return p;
  }

  void deallocate(void *ptr, size_t nbytes) override {
    current_.fetch_sub(static_cast<int64_t>(nbytes));
    size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) rounded = kAlignment;
    if (rounded >= kCacheMinBytes) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + static_cast<int64_t>(rounded) <= cache_limit_) {
        free_[rounded].push_back(ptr);
        cached_ += static_cast<int64_t>(rounded);
        return;
      }
    }
    std::free(ptr);
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto &[size, blocks] : free_)
      for (void *p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

  Device device() const override { return kCPU; }
  size_t alignment() const override { return kAlignment; }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return MemoryStats{current_.load(), peak_.load(), allocs_.load(), cached_, hits_.load()};
  }
  void reset_peak_stats() override { peak_.store(current_.load()); }

private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocs_{0};
  std::atomic<int64_t> hits_{0};
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void *>> free_;  ///< rounded size -> cached blocks
  int64_t cached_ = 0;                                    ///< bytes in free_
  int64_t cache_limit_ = 0;
};

}  // namespace

Allocator &cpu_allocator() {
  static CPUAllocator *instance = new CPUAllocator();  // never destroyed: buffers may outlive statics
  return *instance;
}

Buffer::Buffer(Allocator &alloc, size_t nbytes)
    : alloc_(alloc), data_(alloc.allocate(nbytes)), nbytes_(nbytes) {}

Buffer::~Buffer() { alloc_.deallocate(data_, nbytes_); }

}  // namespace kiln::runtime
