// The bookkeeping of the CUDA caching allocator (CachingAllocator.h): blocks,
// the two pools, pending events and the counters. Not thread-safe by itself:
// CachingAllocator holds the mutex around every call.
//
// DeviceCache.cpp: malloc, free, split, merge. DeviceCacheRelease.cpp:
// stream uses and events, releasing the cache, out of memory, snapshots.
#pragma once

#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/runtime/cuda/AllocatorRules.h"
#include "kiln/runtime/cuda/AllocatorStats.h"
#include "kiln/runtime/cuda/DeviceMemory.h"

namespace kiln::runtime::cuda {

struct PrivatePool;

/// A piece of a segment: allocated, free in a pool, or freed and waiting for
/// events (PyTorch's Block). The blocks of one segment form a list by
/// address (prev/next) that tiles the segment.
struct Block {
  StreamHandle stream = kDefaultStream; ///< the stream it was allocated on
  size_t size = 0;                      ///< bytes
  uintptr_t address = 0;
  PoolKind pool = PoolKind::Small;
  size_t requested_size = 0; ///< bytes the caller asked for
  bool allocated = false;
  Block *prev = nullptr;              ///< the block before it in its segment
  Block *next = nullptr;              ///< the block after it in its segment
  int event_count = 0;                ///< events still pending since it was freed
  std::set<StreamHandle> stream_uses; ///< other streams it was used on (record_stream)
  PrivatePool *private_pool = nullptr; ///< the graph pool its segment belongs to, or null (the device's pools)

  bool is_split() const { return prev != nullptr || next != nullptr; }
};

/// Best-fit order: stream, then size, then address (PyTorch's
/// BlockComparatorSize), so lower_bound({stream, size, 0}) is the smallest
/// block of that stream that fits.
struct BlockBestFit {
  bool operator()(const Block *a, const Block *b) const;
};
using BlockPool = std::set<Block *, BlockBestFit>;

/// A graph's private memory pool (PyTorch's PrivatePool): segments
/// allocated while a stream captures into it, kept out of the device's
/// pools so a graph's replays find its memory where the capture left it.
struct PrivatePool {
  GraphPoolId id = 0;
  int use_count = 0;                   ///< captures begun into it and not released
  std::array<BlockPool, 2> free_blocks; ///< its free blocks, by PoolKind
  size_t segments = 0;
  int64_t reserved_bytes = 0;
  int64_t allocated_bytes = 0;
};

/// One rounded request.
struct Request {
  size_t requested = 0; ///< bytes the caller asked for
  size_t size = 0;      ///< rounded (round_size)
  StreamHandle stream = kDefaultStream;
  PoolKind pool = PoolKind::Small;
  size_t segment = 0; ///< segment size to allocate when nothing fits
  PrivatePool *private_pool = nullptr; ///< the graph pool it is served from, or null
};

class DeviceCache {
public:
  DeviceCache(DeviceMemory &device, int device_index, const AllocatorOptions &options);
  ~DeviceCache();

  /// The mutex of the allocator (every public DeviceCache call holds it).
  std::mutex mutex;

  Block *malloc(size_t nbytes, StreamHandle stream);
  void free(void *ptr);
  void record_stream(void *ptr, StreamHandle stream);
  void empty_cache();
  const CudaMemoryStats &stats() const { return stats_; }
  void reset_peak() { stats_.reset_peak(); }
  std::vector<SegmentInfo> snapshot() const;

  // Graph pools (CachingAllocator.h): DeviceCacheGraphPool.cpp.
  GraphPoolId new_graph_pool() { return ++last_pool_id_; }
  void begin_allocate_to_pool(GraphPoolId id, StreamHandle stream);
  void end_allocate_to_pool(StreamHandle stream);
  void release_pool(GraphPoolId id);
  GraphPoolStats graph_pool_stats(GraphPoolId id) const;

private:
  // DeviceCache.cpp
  Block *take_free_block(const Request &r);
  Block *allocate_segment(const Request &r, bool is_retry);
  Block *allocate_segment_with_retry(const Request &r);
  Block *split_block(Block *block, size_t size);
  void mark_allocated(Block *block, const Request &r);
  Block *allocated_block(void *ptr, const char *what) const;
  void free_block(Block *block);
  void try_merge(Block *dst, Block *src);
  BlockPool &pool(PoolKind kind) { return pools_[static_cast<size_t>(kind)]; }
  /// The free list a block (or a request) belongs to: its graph pool's or the device's.
  BlockPool &free_list(PrivatePool *private_pool, PoolKind kind) {
    return private_pool ? private_pool->free_blocks[static_cast<size_t>(kind)] : pool(kind);
  }
  BlockPool &free_list(const Block *block) { return free_list(block->private_pool, block->pool); }

  // DeviceCacheGraphPool.cpp
  PrivatePool *capture_target(StreamHandle stream) const;
  void release_unused_pool_segment(Block *block);
  void delete_pool_if_empty(PrivatePool *pool);

  // DeviceCacheRelease.cpp
  void insert_events(Block *block);
  void process_events();
  void synchronize_and_free_events();
  void release_cached_blocks();
  void release_segment(Block *block);
  EventHandle take_event();
  void destroy_spare_events();
  [[noreturn]] void throw_out_of_memory(const Request &r);

  DeviceMemory &device_;
  int device_index_;
  AllocatorOptions options_;
  std::array<BlockPool, 2> pools_;                   ///< free blocks, by PoolKind
  std::unordered_map<uintptr_t, Block *> allocated_; ///< allocated blocks by address
  std::unordered_set<Block *> active_;               ///< allocated or waiting for events
  std::map<StreamHandle, std::deque<std::pair<EventHandle, Block *>>> pending_events_; ///< per stream, in record order
  std::vector<EventHandle> spare_events_; ///< completed events kept for reuse (PyTorch's EventPool)
  CudaMemoryStats stats_;
  std::map<GraphPoolId, std::unique_ptr<PrivatePool>> private_pools_; ///< live graph pools
  std::map<StreamHandle, PrivatePool *> capture_targets_; ///< streams whose mallocs go to a graph pool
  GraphPoolId last_pool_id_ = 0;
};

} // namespace kiln::runtime::cuda
