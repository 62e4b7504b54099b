// Shared helpers of the CUDA caching allocator tests: units, and the
// invariant check the randomized trace runs after every step.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>

#include "kiln/runtime/cuda/CachingAllocator.h"
#include "kiln/runtime/cuda/CachingHostAllocator.h"
#include "kiln/runtime/cuda/CurrentStream.h"
#include "kiln/runtime/cuda/FakeDevice.h"

namespace kiln::runtime::cuda::test {

constexpr size_t kMiB = size_t{1} << 20;

inline uintptr_t address_of(const void *ptr) { return reinterpret_cast<uintptr_t>(ptr); }

/// PyTorch's defaults, whatever $KILN_CUDA_ALLOC_CONF says.
inline AllocatorOptions no_options() { return AllocatorOptions{}; }

/// Sums over a snapshot, per pool (index 0 small, 1 large).
struct SnapshotSums {
  int64_t segments[2] = {0, 0};
  int64_t reserved[2] = {0, 0};
  int64_t allocated[2] = {0, 0};
  int64_t allocated_blocks[2] = {0, 0};
  int64_t active[2] = {0, 0};
  int64_t active_blocks[2] = {0, 0};
};

/// Checks one segment: its blocks tile it exactly (first at the segment's
/// address, each the next's predecessor), sizes are multiples of
/// kMinBlockSize, and no two neighbours are both free and inactive (they
/// would have merged). Adds the segment to `sums`.
inline void check_segment(const SegmentInfo &seg, SnapshotSums &sums) {
  ASSERT_FALSE(seg.blocks.empty());
  EXPECT_EQ(seg.blocks.front().address, seg.address);
  uintptr_t expected_address = seg.address;
  size_t total = 0;
  const int pool = seg.pool == PoolKind::Small ? 0 : 1;
  for (size_t i = 0; i < seg.blocks.size(); ++i) {
    const BlockInfo &b = seg.blocks[i];
    EXPECT_EQ(b.address, expected_address) << "block " << i << " does not follow its predecessor";
    EXPECT_EQ(b.size % kMinBlockSize, 0u);
    EXPECT_GT(b.size, 0u);
    if (i > 0) {
      const BlockInfo &prev = seg.blocks[i - 1];
      EXPECT_FALSE(!prev.active && !b.active) << "two free neighbours were not merged at block " << i;
    }
    expected_address += b.size;
    total += b.size;
    sums.allocated[pool] += b.allocated ? static_cast<int64_t>(b.size) : 0;
    sums.allocated_blocks[pool] += b.allocated ? 1 : 0;
    sums.active[pool] += b.active ? static_cast<int64_t>(b.size) : 0;
    sums.active_blocks[pool] += b.active ? 1 : 0;
  }
  EXPECT_EQ(total, seg.total_size);
  if (seg.pool == PoolKind::Small)
    EXPECT_EQ(seg.total_size, kSmallBuffer);
  sums.segments[pool] += 1;
  sums.reserved[pool] += static_cast<int64_t>(seg.total_size);
}

/// Checks that a counter's pools sum to its total and equal `sums`.
inline void check_stat(const char *name, const StatByPool &stat, const int64_t (&sums)[2]) {
  EXPECT_EQ(stat.small.current, sums[0]) << name << " (small pool)";
  EXPECT_EQ(stat.large.current, sums[1]) << name << " (large pool)";
  EXPECT_EQ(stat.all.current, sums[0] + sums[1]) << name;
  EXPECT_LE(stat.all.current, stat.all.peak) << name;
}

/// Every invariant of the allocator against its snapshot, the fake device
/// and the caller's live allocations (address -> requested bytes).
inline void check_invariants(const CachingAllocator &alloc, const FakeDevice &dev,
                             const std::map<uintptr_t, size_t> &live) {
  std::vector<SegmentInfo> segments = alloc.snapshot();
  SnapshotSums sums;
  std::map<uintptr_t, BlockInfo> allocated_blocks;
  for (size_t i = 0; i < segments.size(); ++i) {
    check_segment(segments[i], sums);
    if (i > 0)
      EXPECT_LE(segments[i - 1].address + segments[i - 1].total_size, segments[i].address) << "overlap";
    for (const BlockInfo &b : segments[i].blocks)
      if (b.allocated)
        allocated_blocks[b.address] = b;
  }
  CudaMemoryStats s = alloc.memory_stats();
  check_stat("segment", s.segment, sums.segments);
  check_stat("reserved_bytes", s.reserved_bytes, sums.reserved);
  check_stat("allocated_bytes", s.allocated_bytes, sums.allocated);
  check_stat("allocation", s.allocation, sums.allocated_blocks);
  check_stat("active_bytes", s.active_bytes, sums.active);
  check_stat("active", s.active, sums.active_blocks);
  EXPECT_EQ(static_cast<int64_t>(dev.used_bytes()), s.reserved_bytes.all.current);
  ASSERT_EQ(allocated_blocks.size(), live.size());
  for (const auto &[address, requested] : live) {
    auto it = allocated_blocks.find(address);
    ASSERT_NE(it, allocated_blocks.end()) << "a live allocation is missing from the snapshot";
    EXPECT_EQ(it->second.requested_size, requested);
    EXPECT_EQ(it->second.size % kMinBlockSize, 0u);
    EXPECT_GE(it->second.size, round_size(requested));
  }
}

} // namespace kiln::runtime::cuda::test
