// The pinned host allocator on the fake device: PyTorch's
// CachingHostAllocator rules (power-of-two sizes, reuse gated by events).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "cuda_allocator_test_util.h"

namespace kiln::runtime::cuda {
namespace {

constexpr StreamHandle kCopyStream = 3;

TEST(CudaHostAllocator, RoundsToPowersOfTwo) {
  // PyTorch: c10::llvm::PowerOf2Ceil(size).
  EXPECT_EQ(round_host_size(0), 1u);
  EXPECT_EQ(round_host_size(1), 1u);
  EXPECT_EQ(round_host_size(1000), 1024u);
  EXPECT_EQ(round_host_size(1024), 1024u);
  EXPECT_EQ(round_host_size(1025), 2048u);
}

TEST(CudaHostAllocator, ReusesAFreedBlockOfTheSameRoundedSize) {
  FakeDevice dev(0);
  CachingHostAllocator pinned(dev);
  EXPECT_EQ(pinned.device(), kCPU);
  void *p = pinned.allocate(1000);
  std::memset(p, 0xab, 1000); // real host memory
  pinned.deallocate(p, 1000);
  EXPECT_EQ(pinned.allocate(600), p); // 600 -> 1024 as well
  void *q = pinned.allocate(2000);    // 2048: another block
  EXPECT_NE(q, p);
  HostMemoryStats s = pinned.host_stats();
  EXPECT_EQ(s.num_cache_hits, 1);
  EXPECT_EQ(s.num_host_alloc, 2);
  EXPECT_EQ(s.allocated_bytes.current, 1024 + 2048);
  EXPECT_EQ(s.reserved_bytes.current, 1024 + 2048);
  pinned.deallocate(p, 600);
  pinned.deallocate(q, 2000);
  EXPECT_EQ(pinned.stats().cached_bytes, 1024 + 2048);
  pinned.empty_cache();
  EXPECT_EQ(dev.num_host_frees(), 2);
  EXPECT_EQ(pinned.host_stats().reserved_bytes.current, 0);
}

TEST(CudaHostAllocator, ABlockUsedByAStreamWaitsForItsEvent) {
  FakeDevice dev(0);
  CachingHostAllocator pinned(dev);
  void *p = pinned.allocate(1000);
  pinned.record_stream(p, kCopyStream); // an async copy reads it
  pinned.deallocate(p, 1000);
  EXPECT_EQ(dev.num_event_records(), 1);
  void *q = pinned.allocate(1000); // the copy may still run: not p
  EXPECT_NE(q, p);
  dev.complete_stream(kCopyStream);
  EXPECT_EQ(pinned.allocate(1000), p); // processed at this allocate: reused
  pinned.deallocate(p, 1000);
  pinned.deallocate(q, 1000);
}

TEST(CudaHostAllocator, RetriesAfterReturningTheCacheThenThrows) {
  FakeDevice dev(0);
  CachingHostAllocator pinned(dev);
  pinned.deallocate(pinned.allocate(4096), 4096);
  dev.fail_next_host_allocations(1);
  void *p = pinned.allocate(100); // refused once: the cached 4096 goes, the retry succeeds
  HostMemoryStats s = pinned.host_stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_host_free, 1);
  EXPECT_EQ(s.reserved_bytes.current, 128);
  dev.fail_next_host_allocations(2);
  try {
    pinned.allocate(100);
    FAIL() << "expected HostOutOfMemoryError";
  } catch (const std::bad_alloc &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("pinned host memory: the system refused 128 bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ulimit -l"), std::string::npos) << msg;
  }
  pinned.deallocate(p, 100);
  EXPECT_THROW(pinned.deallocate(p, 100), std::invalid_argument);
}

} // namespace
} // namespace kiln::runtime::cuda
