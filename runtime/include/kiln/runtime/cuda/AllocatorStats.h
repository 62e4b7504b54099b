// kiln/runtime/cuda/AllocatorStats.h - what the CUDA caching allocator
// reports: torch.cuda.memory_stats() counters (per pool), its snapshot of
// segments and blocks (torch.cuda.memory_snapshot()), and the
// out-of-memory error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/runtime/cuda/AllocatorRules.h"
#include "kiln/runtime/cuda/DeviceMemory.h"

namespace kiln::runtime::cuda {

/// One counter (PyTorch's Stat): its value now, its high-water mark since
/// the last reset_peak_memory_stats(), and the sums of increases and
/// decreases since the allocator was made.
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0; ///< sum of increases
  int64_t freed = 0;     ///< sum of decreases

  void increase(int64_t amount);
  void decrease(int64_t amount);
  void reset_peak() { peak = current; }
};

/// A counter for all pools together and for each pool (PyTorch's StatArray
/// over AGGREGATE, SMALL_POOL, LARGE_POOL).
struct StatByPool {
  Stat all;
  Stat small;
  Stat large;

  Stat &of(PoolKind pool) { return pool == PoolKind::Small ? small : large; }
  const Stat &of(PoolKind pool) const { return pool == PoolKind::Small ? small : large; }
  /// Changes `all` and the pool's counter by `amount` (either sign).
  void add(PoolKind pool, int64_t amount);
  void reset_peak();
};

/// torch.cuda.memory_stats() of one device. Bytes are block sizes (rounded),
/// except requested_bytes (the sizes asked for).
struct CudaMemoryStats {
  StatByPool allocation;      ///< blocks handed out and not freed (count)
  StatByPool segment;         ///< segments held from the device (count)
  StatByPool active;          ///< blocks allocated or waiting for events (count)
  StatByPool allocated_bytes; ///< bytes of allocated blocks
  StatByPool reserved_bytes;  ///< bytes of segments held from the device
  StatByPool active_bytes;    ///< bytes of active blocks
  StatByPool requested_bytes; ///< bytes asked for by active blocks' callers

  int64_t num_allocs = 0;           ///< malloc calls served
  int64_t num_frees = 0;            ///< free calls
  int64_t num_cache_hits = 0;       ///< mallocs served from a cached block
  int64_t num_alloc_retries = 0;    ///< device allocations retried after freeing the cache
  int64_t num_ooms = 0;             ///< OutOfMemoryErrors thrown
  int64_t num_device_alloc = 0;     ///< successful raw_allocate calls
  int64_t num_device_free = 0;      ///< raw_free calls
  int64_t num_sync_all_streams = 0; ///< times every pending event was waited for (cache release)
  /// Bytes of segments held by CUDA graph pools (included in reserved_bytes;
  /// empty_cache does not return them: the graphs' replays use them).
  Stat graph_pool_reserved_bytes;
  /// Bytes of allocated blocks of CUDA graph pools (included in allocated_bytes).
  Stat graph_pool_allocated_bytes;

  /// Sets every peak to its current value.
  void reset_peak();
};

/// A CUDA graph memory pool's id (PyTorch's MempoolId_t, what
/// torch.cuda.graph_pool_handle() returns); 0 is never an id.
using GraphPoolId = uint64_t;

/// What one graph pool holds (CachingAllocator::graph_pool_stats).
struct GraphPoolStats {
  int use_count = 0;           ///< captures into it not yet released (0: the pool is gone or never used)
  size_t segments = 0;         ///< segments it holds from the device
  int64_t reserved_bytes = 0;  ///< bytes of those segments
  int64_t allocated_bytes = 0; ///< bytes of its allocated blocks
};

/// One block of a segment in a snapshot (PyTorch's BlockInfo).
struct BlockInfo {
  uintptr_t address = 0;
  size_t size = 0;           ///< bytes (a multiple of kMinBlockSize)
  size_t requested_size = 0; ///< bytes asked for (0 for a free block)
  bool allocated = false;
  bool active = false; ///< allocated, or freed and waiting for events
};

/// One segment (one raw_allocate) and the blocks that tile it, in address
/// order (PyTorch's SegmentInfo).
struct SegmentInfo {
  uintptr_t address = 0;
  size_t total_size = 0;
  StreamHandle stream = kDefaultStream; ///< the stream its blocks serve
  PoolKind pool = PoolKind::Small;
  std::vector<BlockInfo> blocks;
};

/// Thrown when a device allocation fails even after the cache was freed
/// (PyTorch's torch.OutOfMemoryError). what() says how much was asked for,
/// the device's total and free memory, what the allocator holds, and what
/// to try.
class OutOfMemoryError : public std::runtime_error {
public:
  struct Report {
    int device = 0;
    size_t requested_bytes = 0; ///< the caller's request
    size_t segment_bytes = 0;   ///< the device allocation that failed
    DeviceMemoryInfo device_memory;
    int64_t allocated_bytes = 0; ///< allocated by Kiln
    int64_t reserved_bytes = 0;  ///< reserved by Kiln (allocated + cached)
  };
  explicit OutOfMemoryError(const Report &report);
  const Report &report() const { return report_; }

private:
  Report report_;
};

} // namespace kiln::runtime::cuda
