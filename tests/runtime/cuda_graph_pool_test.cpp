// The CUDA caching allocator's graph pools (CachingAllocator.h; PyTorch's
// private pools) on the fake device: mallocs on a capturing stream come
// from the pool, stay out of the device's pools and empty_cache, are
// reused by a second capture into the same pool, and go back to the device
// when the last capture is released.
#include <vector>

#include "cuda_allocator_test_util.h"

namespace kiln::runtime::cuda::test {
namespace {

constexpr StreamHandle kCapture = 7;
constexpr StreamHandle kOther = 8;

TEST(CudaGraphPool, CaptureMallocsComeFromThePoolAndStayReserved) {
  FakeDevice dev(1024 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *outside = alloc.malloc(4 * kMiB, kCapture); // a segment of the device's large pool
  alloc.free(outside);
  const GraphPoolId pool = alloc.new_graph_pool();
  ASSERT_NE(pool, 0u);
  alloc.begin_allocate_to_pool(pool, kCapture);
  void *a = alloc.malloc(4 * kMiB, kCapture); // not the cached block: a new segment of the pool
  void *b = alloc.malloc(1000, kCapture);     // small pool of the graph pool
  void *c = alloc.malloc(1000, kOther);       // another stream: the device's pools
  alloc.end_allocate_to_pool(kCapture);
  EXPECT_NE(a, outside);
  EXPECT_EQ(dev.num_raw_allocs(), 4); // outside's segment, a's, b's, c's

  GraphPoolStats s = alloc.graph_pool_stats(pool);
  EXPECT_EQ(s.use_count, 1);
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(kLargeBuffer + kSmallBuffer));
  EXPECT_EQ(s.allocated_bytes, static_cast<int64_t>(4 * kMiB + 1024));
  CudaMemoryStats stats = alloc.memory_stats();
  EXPECT_EQ(stats.graph_pool_reserved_bytes.current, s.reserved_bytes);
  EXPECT_EQ(stats.graph_pool_allocated_bytes.current, s.allocated_bytes);

  // Freed after the capture: back to the pool, not to the device's pools.
  alloc.free(a);
  alloc.free(b);
  alloc.empty_cache(); // returns outside's and c's segments... c is allocated: only outside's
  EXPECT_EQ(alloc.graph_pool_stats(pool).reserved_bytes, static_cast<int64_t>(kLargeBuffer + kSmallBuffer));
  EXPECT_EQ(alloc.graph_pool_stats(pool).allocated_bytes, 0);
  void *d = alloc.malloc(4 * kMiB, kCapture); // outside any capture: not the pool's block
  EXPECT_NE(d, a);
  alloc.free(d);
  alloc.free(c);

  // Released by the last graph: its segments go back to the device.
  const int64_t frees_before = dev.num_raw_frees();
  alloc.release_pool(pool);
  EXPECT_EQ(dev.num_raw_frees(), frees_before + 2);
  EXPECT_EQ(alloc.graph_pool_stats(pool).use_count, 0);
  EXPECT_EQ(alloc.memory_stats().graph_pool_reserved_bytes.current, 0);
}

TEST(CudaGraphPool, ASecondCaptureIntoTheSamePoolReusesItsBlocks) {
  FakeDevice dev(1024 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  const GraphPoolId pool = alloc.new_graph_pool();
  // Graph 1: three buffers of a shape, freed after the capture (its temporaries).
  alloc.begin_allocate_to_pool(pool, kCapture);
  std::vector<void *> first = {alloc.malloc(3 * kMiB, kCapture), alloc.malloc(3 * kMiB, kCapture),
                               alloc.malloc(64 * 1024, kCapture)};
  alloc.end_allocate_to_pool(kCapture);
  for (void *p : first)
    alloc.free(p);
  const int64_t raw_allocs = dev.num_raw_allocs();
  const GraphPoolStats after_first = alloc.graph_pool_stats(pool);
  // Graph 2, another shape at most as large, same pool: no new segment.
  alloc.begin_allocate_to_pool(pool, kCapture);
  std::vector<void *> second = {alloc.malloc(2 * kMiB, kCapture), alloc.malloc(3 * kMiB, kCapture),
                                alloc.malloc(1000, kCapture)};
  alloc.end_allocate_to_pool(kCapture);
  EXPECT_EQ(dev.num_raw_allocs(), raw_allocs);
  EXPECT_EQ(alloc.graph_pool_stats(pool).reserved_bytes, after_first.reserved_bytes);
  EXPECT_EQ(alloc.graph_pool_stats(pool).use_count, 2);
  EXPECT_EQ(second[0], first[0]); // best fit within the pool, from its lowest address
  // One release keeps the pool (graph 2 still holds it); the second frees it
  // once the blocks are freed.
  alloc.release_pool(pool);
  EXPECT_EQ(alloc.graph_pool_stats(pool).reserved_bytes, after_first.reserved_bytes);
  alloc.release_pool(pool);
  EXPECT_GT(alloc.graph_pool_stats(pool).reserved_bytes, 0); // blocks still allocated
  for (void *p : second)
    alloc.free(p);
  EXPECT_EQ(alloc.graph_pool_stats(pool).segments, 0u);
  EXPECT_EQ(dev.used_bytes(), 0u);
}

TEST(CudaGraphPool, DuringACaptureTheCacheIsNotReturnedToTheDevice) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  alloc.free(alloc.malloc(30 * kMiB, kOther)); // a cached 30 MiB segment
  const GraphPoolId pool = alloc.new_graph_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  alloc.empty_cache(); // nothing: cuMemFree would break the capture
  EXPECT_EQ(dev.num_raw_frees(), 0);
  EXPECT_THROW(alloc.malloc(40 * kMiB, kCapture), OutOfMemoryError); // no release and retry either
  EXPECT_EQ(dev.num_raw_frees(), 0);
  EXPECT_EQ(alloc.memory_stats().num_alloc_retries, 0);
  alloc.end_allocate_to_pool(kCapture);
  alloc.release_pool(pool);
  alloc.empty_cache();
  EXPECT_EQ(dev.num_raw_frees(), 1);
}

TEST(CudaGraphPool, MisuseNamesTheCallAndTheValue) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  EXPECT_THROW(alloc.begin_allocate_to_pool(0, kCapture), std::invalid_argument);
  const GraphPoolId pool = alloc.new_graph_pool();
  alloc.begin_allocate_to_pool(pool, kCapture);
  try {
    alloc.begin_allocate_to_pool(pool, kCapture);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("stream 7 of cuda:0 allocates to a graph pool already"), std::string::npos)
        << e.what();
  }
  alloc.end_allocate_to_pool(kCapture);
  EXPECT_THROW(alloc.end_allocate_to_pool(kCapture), std::invalid_argument);
  alloc.release_pool(pool);
  try {
    alloc.release_pool(pool);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("graph pool " + std::to_string(pool) + " of cuda:0 is not live"),
              std::string::npos)
        << e.what();
  }
}

} // namespace
} // namespace kiln::runtime::cuda::test
