// The CPU allocator: aligned_alloc with 64-byte alignment and byte counters.
#include <cstdlib>
#include <new>

#include "kiln/runtime/Allocator.h"

namespace kiln::runtime {
namespace {

class CPUAllocator final : public Allocator {
public:
  static constexpr size_t kAlignment = 64;

  void *allocate(size_t nbytes) override {
    // aligned_alloc wants a multiple of the alignment; zero-size tensors still
    // get a valid, unique pointer.
    size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) rounded = kAlignment;
    void *p = std::aligned_alloc(kAlignment, rounded);
    if (!p) throw std::bad_alloc();
    int64_t now = current_.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
    int64_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    allocs_.fetch_add(1);
    return p;
  }

  void deallocate(void *ptr, size_t nbytes) override {
    std::free(ptr);
    current_.fetch_sub(static_cast<int64_t>(nbytes));
  }

  Device device() const override { return kCPU; }
  size_t alignment() const override { return kAlignment; }

  MemoryStats stats() const override {
    return MemoryStats{current_.load(), peak_.load(), allocs_.load()};
  }
  void reset_peak_stats() override { peak_.store(current_.load()); }

private:
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocs_{0};
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
