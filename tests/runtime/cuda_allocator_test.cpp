// The CUDA caching allocator's bookkeeping on a fake device: PyTorch's
// rules (c10/cuda/CUDACachingAllocator.cpp), each expected value derived
// from its constants (AllocatorRules.h):
//   kMinBlockSize 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB,
//   kMinLargeAlloc 10 MiB, kLargeBuffer 20 MiB, kRoundLarge 2 MiB.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "cuda_allocator_test_util.h"

namespace kiln::runtime::cuda {
namespace {

using test::address_of;
using test::kMiB;
using test::no_options;

constexpr StreamHandle kStream1 = 1;
constexpr StreamHandle kStream2 = 2;

TEST(CudaAllocatorRules, RoundsToMinBlockSize) {
  // kMinBlockSize = 512: every size becomes a multiple of 512, at least 512.
  EXPECT_EQ(round_size(0), 512u);
  EXPECT_EQ(round_size(1), 512u);
  EXPECT_EQ(round_size(512), 512u);
  EXPECT_EQ(round_size(513), 1024u);
  EXPECT_EQ(pool_of(kMiB), PoolKind::Small);       // <= kSmallSize
  EXPECT_EQ(pool_of(kMiB + 512), PoolKind::Large); // > kSmallSize
  EXPECT_EQ(segment_size(1024), 2 * kMiB);         // kSmallBuffer
  EXPECT_EQ(segment_size(5 * kMiB), 20 * kMiB);    // < kMinLargeAlloc: kLargeBuffer
  EXPECT_EQ(segment_size(10 * kMiB), 10 * kMiB);   // >= kMinLargeAlloc: rounded to kRoundLarge
  EXPECT_EQ(segment_size(11 * kMiB), 12 * kMiB);
}

TEST(CudaAllocatorRules, SplitRules) {
  // Small pool: split when the remainder is >= kMinBlockSize (512).
  EXPECT_TRUE(should_split(1024, 512, PoolKind::Small, kNoMaxSplitSize));
  EXPECT_FALSE(should_split(1024, 1024, PoolKind::Small, kNoMaxSplitSize));
  // Large pool: only when the remainder is > kSmallSize (1 MiB).
  EXPECT_FALSE(should_split(12 * kMiB, 11 * kMiB, PoolKind::Large, kNoMaxSplitSize));
  EXPECT_TRUE(should_split(12 * kMiB, 11 * kMiB - 512, PoolKind::Large, kNoMaxSplitSize));
  // Oversize requests (>= max_split_size) are never split.
  EXPECT_FALSE(should_split(50 * kMiB, 45 * kMiB, PoolKind::Large, 40 * kMiB));
}

TEST(CudaAllocatorRules, ParsesAllocConf) {
  EXPECT_EQ(parse_allocator_conf("").max_split_size, kNoMaxSplitSize);
  EXPECT_EQ(parse_allocator_conf("max_split_size_mb:40").max_split_size, 40 * kMiB);
  // PyTorch requires max_split_size_mb > 20 (kLargeBuffer in MiB).
  EXPECT_THROW(parse_allocator_conf("max_split_size_mb:20"), std::invalid_argument);
  try {
    parse_allocator_conf("expandable_segments:True");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("unknown key \"expandable_segments\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_split_size_mb:N"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_allocator_conf("max_split_size_mb:lots"), std::invalid_argument);
}

TEST(CudaAllocatorRules, FormatsBytesLikePyTorch) {
  EXPECT_EQ(format_bytes(512), "512 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(format_bytes(uint64_t{80} << 30), "80.00 GiB");
}

TEST(CudaAllocator, RequestedSizesAreRounded) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  alloc.malloc(1, kStream1);
  EXPECT_EQ(alloc.memory_stats().allocated_bytes.all.current, 512); // kMinBlockSize
  EXPECT_EQ(alloc.memory_stats().requested_bytes.all.current, 1);
  alloc.malloc(513, kStream1);
  EXPECT_EQ(alloc.memory_stats().allocated_bytes.all.current, 512 + 1024);
}

TEST(CudaAllocator, SegmentSizesPerPool) {
  FakeDevice dev(256 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  alloc.malloc(1024, kStream1); // small pool: a kSmallBuffer segment
  EXPECT_EQ(alloc.memory_stats().reserved_bytes.small.current, int64_t(2 * kMiB));
  alloc.malloc(5 * kMiB, kStream1); // large, < kMinLargeAlloc: a kLargeBuffer segment
  EXPECT_EQ(alloc.memory_stats().reserved_bytes.large.current, int64_t(20 * kMiB));
  // >= kMinLargeAlloc: rounded up to kRoundLarge. (On another stream, else the
  // 20 MiB segment's free 15 MiB tail would serve it.)
  alloc.malloc(11 * kMiB, kStream2);
  CudaMemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.reserved_bytes.large.current, int64_t(20 * kMiB + 12 * kMiB));
  EXPECT_EQ(s.reserved_bytes.all.current, int64_t(2 * kMiB + 20 * kMiB + 12 * kMiB));
  EXPECT_EQ(s.segment.small.current, 1);
  EXPECT_EQ(s.segment.large.current, 2);
  EXPECT_EQ(dev.num_raw_allocs(), 3);
  EXPECT_EQ(dev.used_bytes(), 34 * kMiB);
}

TEST(CudaAllocator, SmallRequestsShareASegment) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  // Two 1 MiB requests (= kSmallSize, the largest small one) fill one 2 MiB segment.
  void *a = alloc.malloc(kMiB, kStream1);
  void *b = alloc.malloc(kMiB, kStream1);
  EXPECT_EQ(address_of(b), address_of(a) + kMiB);
  EXPECT_EQ(dev.num_raw_allocs(), 1);
  alloc.malloc(kMiB, kStream1); // the segment is full: a second one
  EXPECT_EQ(dev.num_raw_allocs(), 2);
}

TEST(CudaAllocator, BestFitPicksTheSmallestAdequateBlock) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *a = alloc.malloc(4096, kStream1);
  alloc.malloc(512, kStream1); // keeps a and c apart (no merge)
  void *c = alloc.malloc(2048, kStream1);
  alloc.malloc(512, kStream1);
  alloc.free(a);
  alloc.free(c);
  // Free blocks now: 4096 (a), 2048 (c), and the segment's ~2 MiB tail.
  EXPECT_EQ(alloc.malloc(2000, kStream1), c); // 2048: an exact fit
  EXPECT_EQ(alloc.malloc(3000, kStream1), a); // 3072: 4096 is the smallest that fits
  // Cache hits: b, c, d (from the segment's tail) and the two above.
  EXPECT_EQ(alloc.memory_stats().num_cache_hits, 5);
  EXPECT_EQ(dev.num_raw_allocs(), 1);
}

TEST(CudaAllocator, SplitAndMergeInTheSmallPool) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *x = alloc.malloc(1000, kStream1);
  void *y = alloc.malloc(1000, kStream1);
  EXPECT_EQ(address_of(y), address_of(x) + 1024); // split off the same segment
  ASSERT_EQ(alloc.snapshot().size(), 1u);
  EXPECT_EQ(alloc.snapshot()[0].blocks.size(), 3u); // x, y, the free tail
  alloc.free(x);
  alloc.free(y);
  std::vector<SegmentInfo> segments = alloc.snapshot();
  ASSERT_EQ(segments.size(), 1u);
  ASSERT_EQ(segments[0].blocks.size(), 1u); // x, y and the tail coalesced
  EXPECT_EQ(segments[0].blocks[0].size, 2 * kMiB);
  EXPECT_FALSE(segments[0].blocks[0].allocated);
  EXPECT_EQ(alloc.memory_stats().reserved_bytes.all.current, int64_t(2 * kMiB)); // unchanged
}

TEST(CudaAllocator, AFreedLargeBlockSplitsForASmallerRequest) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *big = alloc.malloc(12 * kMiB, kStream1); // its own 12 MiB segment
  alloc.free(big);
  void *part = alloc.malloc(4 * kMiB, kStream1); // remainder 8 MiB > kSmallSize: split
  EXPECT_EQ(part, big);
  std::vector<SegmentInfo> segments = alloc.snapshot();
  ASSERT_EQ(segments.size(), 1u);
  ASSERT_EQ(segments[0].blocks.size(), 2u);
  EXPECT_EQ(segments[0].blocks[0].size, 4 * kMiB);
  EXPECT_EQ(segments[0].blocks[1].size, 8 * kMiB);
  EXPECT_EQ(dev.num_raw_allocs(), 1);
  alloc.free(part);
  // Remainder 512 KiB <= kSmallSize: the 12 MiB block is handed out whole.
  alloc.malloc(11 * kMiB + 512 * 1024, kStream1);
  EXPECT_EQ(alloc.memory_stats().allocated_bytes.all.current, int64_t(12 * kMiB));
  EXPECT_EQ(alloc.snapshot()[0].blocks.size(), 1u);
}

TEST(CudaAllocator, OversizeBlocksAreNotSplit) {
  FakeDevice dev(256 * kMiB);
  CachingAllocator alloc(dev, 0, parse_allocator_conf("max_split_size_mb:40"));
  void *p = alloc.malloc(50 * kMiB, kStream1);
  alloc.free(p);
  // 45 MiB >= max_split_size and 50 < 45 + kLargeBuffer: the block is reused whole.
  EXPECT_EQ(alloc.malloc(45 * kMiB, kStream1), p);
  EXPECT_EQ(alloc.memory_stats().allocated_bytes.all.current, int64_t(50 * kMiB));
  alloc.free(p);
  // 30 MiB < max_split_size: an oversize block does not serve it.
  EXPECT_NE(alloc.malloc(30 * kMiB, kStream1), p);
  EXPECT_EQ(dev.num_raw_allocs(), 2);
}

TEST(CudaAllocator, NoReuseAcrossStreams) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *p = alloc.malloc(1000, kStream1);
  alloc.free(p);
  void *q = alloc.malloc(1000, kStream2); // stream 1's cached segment is not used
  EXPECT_EQ(dev.num_raw_allocs(), 2);
  EXPECT_NE(q, p);
  EXPECT_EQ(alloc.malloc(1000, kStream1), p); // stream 1 gets its block back
  std::vector<SegmentInfo> segments = alloc.snapshot();
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_NE(segments[0].stream, segments[1].stream);
}

TEST(CudaAllocator, RecordStreamGatesReuseOnAnEvent) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *p = alloc.malloc(1000, kStream1);
  alloc.record_stream(p, kStream1); // its own stream: nothing to wait for
  alloc.record_stream(p, kStream2);
  alloc.free(p);
  EXPECT_EQ(dev.num_event_records(), 1); // one event, on stream 2
  CudaMemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 0);
  EXPECT_EQ(s.active.all.current, 1); // waiting for the event
  void *q = alloc.malloc(1000, kStream1);
  EXPECT_EQ(address_of(q), address_of(p) + 1024); // p is not reused yet: the tail serves
  dev.complete_stream(kStream2);
  EXPECT_EQ(alloc.malloc(1000, kStream1), p); // processed at this malloc: reused
  EXPECT_EQ(dev.num_events_created(), 1);
  // The completed event is reused by the next cross-stream free.
  alloc.record_stream(q, kStream2);
  alloc.free(q);
  EXPECT_EQ(dev.num_events_created(), 1);
  EXPECT_EQ(dev.num_event_records(), 2);
}

TEST(CudaAllocator, EmptyCacheWaitsForPendingEvents) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *p = alloc.malloc(1000, kStream1);
  alloc.record_stream(p, kStream2);
  alloc.free(p);
  alloc.empty_cache(); // synchronizes the event, merges p back, releases the segment
  CudaMemoryStats s = alloc.memory_stats();
  EXPECT_EQ(dev.num_event_synchronizes(), 1);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.reserved_bytes.all.current, 0);
  EXPECT_EQ(s.active.all.current, 0);
  EXPECT_EQ(dev.used_bytes(), 0u);
  EXPECT_EQ(dev.num_events_live(), 0); // spare events are destroyed too
}

TEST(CudaAllocator, RetryAfterReleasingTheCache) {
  FakeDevice dev(30 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  alloc.free(alloc.malloc(5 * kMiB, kStream1)); // a cached, unsplit 20 MiB segment
  // 22 MiB needs its own segment; only 10 MiB is free until the cache goes.
  void *p = alloc.malloc(22 * kMiB, kStream1);
  EXPECT_NE(p, nullptr);
  CudaMemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_EQ(s.reserved_bytes.all.current, int64_t(22 * kMiB));
  EXPECT_EQ(dev.num_raw_alloc_failures(), 1);
}

TEST(CudaAllocator, OutOfMemoryErrorSaysWhatIsHeldAndWhatToTry) {
  FakeDevice dev(30 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *x = alloc.malloc(5 * kMiB, kStream1); // both in one 20 MiB segment
  void *y = alloc.malloc(5 * kMiB, kStream1);
  alloc.free(x); // split segment: cached but not releasable
  try {
    alloc.malloc(12 * kMiB, kStream1); // a 12 MiB segment; 10 MiB is free
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError &e) {
    std::string msg = e.what();
    for (const char *part : {"CUDA out of memory on cuda:0", "Tried to allocate 12.00 MiB",
                             "total capacity of 30.00 MiB", "of which 10.00 MiB is free",
                             "5.00 MiB is allocated by Kiln", "15.00 MiB is reserved by Kiln but unallocated",
                             "smaller batch", "empty_cache()", "memory_budget", "KILN_CUDA_ALLOC_CONF"})
      EXPECT_NE(msg.find(part), std::string::npos) << "missing \"" << part << "\" in: " << msg;
    EXPECT_EQ(e.report().reserved_bytes, int64_t(20 * kMiB));
  }
  CudaMemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);               // the retry after releasing the cache happened
  alloc.free(y);                                   // still consistent after the error: x and y coalesce into 20 MiB
  EXPECT_EQ(alloc.malloc(12 * kMiB, kStream1), x); // which now serves the request
}

TEST(CudaAllocator, EmptyCacheReturnsOnlyUnsplitFreeSegments) {
  FakeDevice dev(256 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *a1 = alloc.malloc(1000, kStream1); // segment A (2 MiB), split
  void *a2 = alloc.malloc(1000, kStream1);
  alloc.free(a1);
  alloc.free(alloc.malloc(5 * kMiB, kStream1)); // segment B (20 MiB), unsplit and free
  alloc.malloc(11 * kMiB, kStream2);            // segment C (12 MiB), allocated (not from B: another stream)
  alloc.empty_cache();
  EXPECT_EQ(dev.num_raw_frees(), 1); // only B
  EXPECT_EQ(alloc.memory_stats().reserved_bytes.all.current, int64_t(2 * kMiB + 12 * kMiB));
  alloc.free(a2); // A coalesces into one free block: now releasable
  alloc.empty_cache();
  EXPECT_EQ(alloc.memory_stats().reserved_bytes.all.current, int64_t(12 * kMiB));
  EXPECT_EQ(dev.used_bytes(), 12 * kMiB);
}

TEST(CudaAllocator, StatsCurrentAndPeak) {
  FakeDevice dev(256 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *a = alloc.malloc(1000, kStream1);
  void *b = alloc.malloc(1000, kStream1);
  alloc.malloc(1000, kStream1);
  alloc.free(a);
  alloc.free(b);
  CudaMemoryStats s = alloc.memory_stats();
  EXPECT_EQ(s.allocated_bytes.all.current, 1024);
  EXPECT_EQ(s.allocated_bytes.all.peak, 3 * 1024);
  EXPECT_EQ(s.allocation.all.current, 1);
  EXPECT_EQ(s.allocation.all.peak, 3);
  alloc.reset_peak_memory_stats();
  EXPECT_EQ(alloc.memory_stats().allocated_bytes.all.peak, 1024);
  alloc.malloc(5 * kMiB, kStream1);
  s = alloc.memory_stats();
  EXPECT_EQ(s.allocated_bytes.small.current, 1024);
  EXPECT_EQ(s.allocated_bytes.large.current, int64_t(5 * kMiB));
  EXPECT_EQ(s.allocated_bytes.all.current, int64_t(5 * kMiB + 1024));
  EXPECT_EQ(s.allocated_bytes.all.peak, int64_t(5 * kMiB + 1024));
  EXPECT_EQ(s.reserved_bytes.all.peak, int64_t(22 * kMiB));
  EXPECT_EQ(s.segment.all.current, 2);
  EXPECT_EQ(s.num_allocs, 4);
  EXPECT_EQ(s.num_frees, 2);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.allocated_bytes.all.allocated - s.allocated_bytes.all.freed, s.allocated_bytes.all.current);
}

TEST(CudaAllocator, BadPointersAreRejected) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  void *p = alloc.malloc(1000, kStream1);
  alloc.free(p);
  try {
    alloc.free(p);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("CachingAllocator::free: pointer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is not allocated by cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(alloc.record_stream(p, kStream2), std::invalid_argument);
}

TEST(CudaAllocator, BufferAllocatesOnTheCurrentStream) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator alloc(dev, 0, no_options());
  EXPECT_EQ(alloc.device(), Device(DeviceType::CUDA, 0));
  EXPECT_EQ(current_stream(0), kDefaultStream);
  {
    StreamGuard guard(0, kStream2);
    EXPECT_EQ(current_stream(0), kStream2);
    auto buf = Buffer::make(1000, alloc);
    EXPECT_EQ(buf->device(), Device(DeviceType::CUDA, 0));
    ASSERT_EQ(alloc.snapshot().size(), 1u);
    EXPECT_EQ(alloc.snapshot()[0].stream, kStream2);
    EXPECT_EQ(alloc.stats().current_bytes, 1024);
  }
  EXPECT_EQ(current_stream(0), kDefaultStream); // restored
  MemoryStats s = alloc.stats();
  EXPECT_EQ(s.current_bytes, 0);
  EXPECT_EQ(s.peak_bytes, 1024);
  EXPECT_EQ(s.cached_bytes, int64_t(2 * kMiB));
  EXPECT_THROW(current_stream(kMaxDevices), std::out_of_range);
}

} // namespace
} // namespace kiln::runtime::cuda
