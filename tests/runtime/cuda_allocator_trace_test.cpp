// Randomized allocation traces (seeded) on the fake device, checking every
// invariant after every step (cuda_allocator_test_util.h), and a
// thread-safety smoke test.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "cuda_allocator_test_util.h"

namespace kiln::runtime::cuda {
namespace {

using test::kMiB;

/// One seeded trace: mallocs (log-uniform 1 B .. 32 MiB, so both pools and
/// all three segment kinds occur), frees, record_stream, completed streams,
/// empty_cache, on three streams of a 256 MiB device (small enough to hit
/// the retry and out-of-memory paths).
class AllocationTrace {
public:
  explicit AllocationTrace(uint32_t seed) : rng_(seed), dev_(256 * kMiB), alloc_(dev_, 0, test::no_options()) {}

  void run(int steps) {
    for (int step = 0; step < steps; ++step) {
      one_step();
      test::check_invariants(alloc_, dev_, live_);
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "first failure after step " << step;
        return;
      }
    }
    stats_before_teardown_ = alloc_.memory_stats();
    events_recorded_ = dev_.num_event_records();
    free_everything();
  }

  /// The counters after the last step (before the trace freed everything).
  const CudaMemoryStats &stats() const { return stats_before_teardown_; }
  int64_t events_recorded() const { return events_recorded_; }

private:
  size_t random_size() {
    std::uniform_real_distribution<double> log_size(0.0, std::log2(32.0 * kMiB));
    return static_cast<size_t>(std::exp2(log_size(rng_)));
  }
  StreamHandle random_stream() { return std::uniform_int_distribution<StreamHandle>(1, 3)(rng_); }
  uintptr_t random_live() {
    auto it = live_.begin();
    std::advance(it, std::uniform_int_distribution<size_t>(0, live_.size() - 1)(rng_));
    return it->first;
  }

  void one_step() {
    int op = std::uniform_int_distribution<int>(0, 99)(rng_);
    if (op < 50 || live_.empty()) {
      do_malloc();
    } else if (op < 88) {
      uintptr_t address = random_live();
      alloc_.free(reinterpret_cast<void *>(address));
      live_.erase(address);
    } else if (op < 94) {
      alloc_.record_stream(reinterpret_cast<void *>(random_live()), random_stream());
    } else if (op < 99) {
      dev_.complete_stream(random_stream());
    } else {
      alloc_.empty_cache();
    }
  }

  void do_malloc() {
    size_t size = random_size();
    try {
      void *ptr = alloc_.malloc(size, random_stream());
      EXPECT_EQ(live_.count(test::address_of(ptr)), 0u) << "a live address was handed out twice";
      live_[test::address_of(ptr)] = size;
    } catch (const OutOfMemoryError &) {
      ++ooms_;
      EXPECT_EQ(alloc_.memory_stats().num_ooms, ooms_);
    }
  }

  void free_everything() {
    for (const auto &[address, size] : live_)
      alloc_.free(reinterpret_cast<void *>(address));
    live_.clear();
    alloc_.empty_cache();
    CudaMemoryStats s = alloc_.memory_stats();
    EXPECT_EQ(s.reserved_bytes.all.current, 0);
    EXPECT_EQ(s.active.all.current, 0);
    EXPECT_EQ(dev_.used_bytes(), 0u);
    EXPECT_EQ(s.num_allocs, s.num_frees);
  }

  std::mt19937 rng_;
  FakeDevice dev_;
  CachingAllocator alloc_;
  std::map<uintptr_t, size_t> live_;
  int64_t ooms_ = 0;
  CudaMemoryStats stats_before_teardown_;
  int64_t events_recorded_ = 0;
};

TEST(CudaAllocatorTrace, InvariantsHoldAfterEveryStep) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    AllocationTrace trace(seed);
    trace.run(2000);
    // The trace went through every path: cache hits, cross-stream events,
    // retries that succeeded (more retries than OOMs) and OOMs.
    const CudaMemoryStats &s = trace.stats();
    EXPECT_GT(s.num_cache_hits, 0);
    EXPECT_GT(trace.events_recorded(), 0);
    EXPECT_GT(s.num_ooms, 0);
    EXPECT_GT(s.num_alloc_retries, s.num_ooms);
  }
}

TEST(CudaAllocatorThreads, ConcurrentMallocFreeKeepsTotalsConsistent) {
  FakeDevice dev(1024 * kMiB);
  CachingAllocator alloc(dev, 0, test::no_options());
  constexpr int kThreads = 4;
  constexpr int kIterations = 3000;
  constexpr size_t kMaxLive = 8;
  auto worker = [&alloc](int id) {
    std::mt19937 rng(100 + id);
    std::vector<void *> live;
    StreamHandle stream = 1 + id % 2; // two threads share each stream
    for (int i = 0; i < kIterations; ++i) {
      if (live.size() < kMaxLive && rng() % 2 == 0) {
        live.push_back(alloc.malloc(1 + rng() % (4 * kMiB), stream));
      } else if (!live.empty()) {
        size_t pick = rng() % live.size();
        alloc.free(live[pick]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
      }
    }
    for (void *ptr : live)
      alloc.free(ptr);
  };
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id)
    threads.emplace_back(worker, id);
  for (std::thread &t : threads)
    t.join();
  CudaMemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.allocation.all.current, 0);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  EXPECT_EQ(s.allocated_bytes.all.allocated, s.allocated_bytes.all.freed);
  test::check_invariants(alloc, dev, {});
  alloc.empty_cache();
  EXPECT_EQ(dev.used_bytes(), 0u);
}

} // namespace
} // namespace kiln::runtime::cuda
