// kiln/runtime/cuda/CachingAllocator.h - the CUDA caching allocator of one
// device, with PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp).
//
//   CachingAllocator alloc(device_memory, /*device_index=*/0);
//   void *p = alloc.malloc(1000, stream);   // a 1024-byte block of a 2 MiB segment
//   alloc.record_stream(p, other_stream);   // p is also used on other_stream
//   alloc.free(p);                          // reusable once other_stream passes this point
//   auto buf = Buffer::make(n, alloc);      // runtime::Allocator: on current_stream(0)
//
// The rules (sizes in AllocatorRules.h):
// - Sizes are rounded up to 512 bytes. Requests up to 1 MiB come from the
//   small pool (2 MiB segments), larger ones from the large pool (20 MiB
//   segments below 10 MiB, else the size rounded up to 2 MiB).
// - Best fit: a request takes the smallest free block of its pool that was
//   allocated on the same stream and is large enough (the pools are ordered
//   by (stream, size, address)); the rest of the block is split off when
//   should_split says so. A block is reused only on the stream it was
//   allocated on: work on that stream is ordered, so the next user runs
//   after the last one without any synchronization.
// - free() merges a block with its free neighbours in the same segment.
// - record_stream(p, s) notes that p is used on stream s too. When p is
//   freed, an event is recorded on each such stream and the block stays out
//   of the pools until every event has completed (checked at the start of
//   each malloc, PyTorch's process_events).
// - When the device cannot allocate a segment, the cache is released
//   (every pending event is waited for, then every free segment that is not
//   split is returned to the device) and the allocation is retried once
//   (num_alloc_retries); if that fails too, OutOfMemoryError.
// - empty_cache() releases the cache the same way.
// - CUDA graph pools (PyTorch's private pools, CudaGraph.h): between
//   begin_allocate_to_pool(pool, stream) and end_allocate_to_pool(stream),
//   every malloc on `stream` is served from the pool's own segments
//   (best fit, split and merge as above, per stream), never from the
//   device's pools and never returned by empty_cache, so a captured graph
//   finds its memory untouched at each replay. A block of a pool freed
//   after the capture goes back to that pool (a later capture into the
//   same pool reuses it: one pool shared by several graphs). When the last
//   capture into a pool is released (release_pool), its free segments go
//   back to the device, and the rest as their blocks are freed. While any
//   stream allocates to a pool (a capture), the allocator neither queries
//   nor synchronizes events nor returns memory to the device (cuMemFree
//   is illegal then): empty_cache does nothing, and a full device is an
//   OutOfMemoryError at once, without the release-and-retry.
// Differences from PyTorch: one mutex (not recursive); no
// expandable segments, garbage-collection threshold, memory fraction,
// history recording or IPC; the retry does not first free only the
// oversize blocks it needs (release_available_cached_blocks); 0 bytes gives
// a 512-byte block (a distinct pointer, the runtime's Allocator contract).
//
// Thread-safe: every public function takes the allocator's mutex (PyTorch's
// per-device allocator has one mutex too).
#pragma once

#include <memory>
#include <vector>

#include "kiln/runtime/Allocator.h"
#include "kiln/runtime/cuda/AllocatorRules.h"
#include "kiln/runtime/cuda/AllocatorStats.h"
#include "kiln/runtime/cuda/DeviceMemory.h"

namespace kiln::runtime::cuda {

class DeviceCache;

/// The device alignment the allocator guarantees: cuMemAlloc's documented
/// minimum (256 bytes); blocks inside a segment start at multiples of
/// kMinBlockSize from it.
constexpr size_t kDeviceAlignment = 256;

class CachingAllocator final : public Allocator {
public:
  /// An allocator over `device` (which must outlive it) for CUDA device
  /// `device_index`. Throws std::invalid_argument from the options parser
  /// when $KILN_CUDA_ALLOC_CONF is malformed and no options are given.
  explicit CachingAllocator(DeviceMemory &device, int device_index = 0,
                            AllocatorOptions options = allocator_options_from_env());
  /// Waits for pending events and returns every free segment. Segments that
  /// still hold allocated blocks are left to the device (their memory may
  /// still be in use).
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator &) = delete;
  CachingAllocator &operator=(const CachingAllocator &) = delete;

  /// A block of at least `nbytes` bytes usable on `stream` without
  /// synchronization. Throws OutOfMemoryError when the device has no room
  /// even after the cache was released.
  void *malloc(size_t nbytes, StreamHandle stream);
  /// Returns a block from malloc to the cache (after the events of its
  /// recorded streams). Throws std::invalid_argument for a pointer this
  /// allocator did not hand out or that was freed already.
  void free(void *ptr);
  /// Marks an allocated block as used on `stream` as well as on its own
  /// (torch.Tensor.record_stream). Using it on its own stream is a no-op.
  /// Throws std::invalid_argument like free.
  void record_stream(void *ptr, StreamHandle stream);

  /// Returns every cached segment that is wholly free to the device, after
  /// waiting for pending events (torch.cuda.empty_cache). Also destroys the
  /// spare events.
  void empty_cache() override;
  /// A copy of the counters (torch.cuda.memory_stats).
  CudaMemoryStats memory_stats() const;
  /// Sets every peak to its current value (torch.cuda.reset_peak_memory_stats).
  void reset_peak_memory_stats();
  /// Every segment and its blocks, by address (torch.cuda.memory_snapshot).
  std::vector<SegmentInfo> snapshot() const;
  // ---- CUDA graph pools (CudaGraph.h uses these; PyTorch's
  // graph_pool_handle, beginAllocateToPool, endAllocateToPool, releasePool)
  /// A new pool id; the pool itself is made by the first
  /// begin_allocate_to_pool with it.
  GraphPoolId new_graph_pool();
  /// From now on mallocs on `stream` come from pool `pool` (made when it is
  /// not live) and the pool's use count goes up by one. Throws
  /// std::invalid_argument for pool 0 or a stream already allocating to a pool.
  void begin_allocate_to_pool(GraphPoolId pool, StreamHandle stream);
  /// Mallocs on `stream` come from the device's pools again. Throws
  /// std::invalid_argument when the stream is not allocating to a pool.
  void end_allocate_to_pool(StreamHandle stream);
  /// The pool's use count goes down by one; at 0 its free segments are
  /// returned to the device now and its other segments when their blocks
  /// are freed. Throws std::invalid_argument for a pool that is not live.
  void release_pool(GraphPoolId pool);
  /// What pool `pool` holds now (zeros for a pool that is not live).
  GraphPoolStats graph_pool_stats(GraphPoolId pool) const;

  /// The options in force.
  const AllocatorOptions &options() const { return options_; }

  // runtime::Allocator: a Buffer of a CUDA tensor comes from here.
  /// malloc(nbytes, current_stream(device_index)) (CurrentStream.h).
  void *allocate(size_t nbytes) override;
  /// free(ptr); `nbytes` is not needed (the block knows its size).
  void deallocate(void *ptr, size_t nbytes) override;
  Device device() const override { return Device(DeviceType::CUDA, device_index_); }
  size_t alignment() const override { return kDeviceAlignment; }
  /// current_bytes/peak_bytes: allocated bytes; cached_bytes: reserved minus
  /// allocated; num_allocs, cache_hits: the counters of memory_stats().
  MemoryStats stats() const override;
  void reset_peak_stats() override { reset_peak_memory_stats(); }

private:
  int device_index_;
  AllocatorOptions options_;
  std::unique_ptr<DeviceCache> cache_;
};

} // namespace kiln::runtime::cuda
