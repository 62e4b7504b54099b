// kiln/runtime/cuda/CachingHostAllocator.h - pinned (page-locked) host
// memory for async copies, cached like PyTorch's CachingHostAllocator
// (aten/src/ATen/core/CachingHostAllocator.h): the home of pin_memory().
//
//   CachingHostAllocator pinned(device_memory);
//   void *staging = pinned.allocate(n);       // rounded up to a power of two
//   ... cuMemcpyHtoDAsync(dst, staging, n, stream) ...
//   pinned.record_stream(staging, stream);    // the copy reads it on `stream`
//   pinned.deallocate(staging, n);            // reused once the copy is done
//
// Rules: sizes are rounded up to a power of two (better reuse; the rounded
// size names the free list). A freed block is reused for a request of the
// same rounded size. A block used by async work (record_stream) is reusable
// only after an event recorded on each of those streams at free time has
// completed (checked at the start of each allocate). Host blocks belong to
// no stream: any stream's request may take a free one. When the system
// refuses more pinned memory, free blocks are returned and the request is
// retried once; then HostOutOfMemoryError.
// Differences from PyTorch: no background event thread, no pinned-memory
// size classes beyond powers of two, 0 bytes gives a 1-byte block (a
// distinct pointer, the runtime's Allocator contract).
//
// Thread-safe: one mutex.
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/runtime/Allocator.h"
#include "kiln/runtime/cuda/AllocatorStats.h"
#include "kiln/runtime/cuda/DeviceMemory.h"

namespace kiln::runtime::cuda {

/// The host alignment the allocator guarantees (DeviceMemory::host_allocate's).
constexpr size_t kHostAlignment = 64;

/// Pinned host memory counters (bytes are rounded block sizes).
struct HostMemoryStats {
  Stat allocated_bytes;       ///< blocks handed out and not freed
  Stat reserved_bytes;        ///< blocks held from the system (allocated + cached + waiting)
  int64_t num_allocs = 0;     ///< allocate calls
  int64_t num_frees = 0;      ///< deallocate calls
  int64_t num_cache_hits = 0; ///< allocations served from a cached block
  int64_t num_host_alloc = 0; ///< successful host_allocate calls
  int64_t num_host_free = 0;  ///< host_free calls
  int64_t num_alloc_retries = 0;
};

/// Thrown when the system refuses pinned memory even after the cache was
/// returned. A std::bad_alloc (the Allocator contract) with a message.
class HostOutOfMemoryError : public std::bad_alloc {
public:
  explicit HostOutOfMemoryError(std::string message) : message_(std::move(message)) {}
  const char *what() const noexcept override { return message_.c_str(); }

private:
  std::string message_;
};

/// The rounded size of a pinned request: the next power of two (1 for 0).
size_t round_host_size(size_t nbytes);

class CachingHostAllocator final : public Allocator {
public:
  /// An allocator over `device` (which must outlive it).
  explicit CachingHostAllocator(DeviceMemory &device);
  /// Waits for pending events and returns every block not allocated.
  ~CachingHostAllocator() override;
  CachingHostAllocator(const CachingHostAllocator &) = delete;
  CachingHostAllocator &operator=(const CachingHostAllocator &) = delete;

  /// At least `nbytes` bytes of pinned host memory. Throws
  /// HostOutOfMemoryError when the system refuses.
  void *allocate(size_t nbytes) override;
  /// Returns a block to the cache (after the events of its recorded
  /// streams). Throws std::invalid_argument for a pointer this allocator
  /// did not hand out or that was freed already; `nbytes` is not needed.
  void deallocate(void *ptr, size_t nbytes) override;
  /// Marks an allocated block as used by work on `stream` (an async copy).
  /// Throws std::invalid_argument like deallocate.
  void record_stream(void *ptr, StreamHandle stream);
  /// Returns every free block (after checking events) to the system.
  void empty_cache() override;

  HostMemoryStats host_stats() const;
  Device device() const override { return kCPU; }
  size_t alignment() const override { return kHostAlignment; }
  /// current/peak_bytes: allocated bytes; cached_bytes: reserved minus
  /// allocated.
  MemoryStats stats() const override;
  void reset_peak_stats() override;

private:
  struct HostBlock {
    void *ptr = nullptr;
    size_t size = 0;
    bool allocated = false;
    int event_count = 0;
    std::set<StreamHandle> streams;
  };
  HostBlock *allocated_block(void *ptr, const char *what);
  HostBlock *take_free_block(size_t size);
  HostBlock *allocate_block(size_t size);
  EventHandle take_event();
  void process_events();
  void synchronize_events();
  void release_free_blocks();

  DeviceMemory &device_;
  mutable std::mutex mutex_;
  std::unordered_map<void *, HostBlock *> blocks_;  ///< every block, by address
  std::map<size_t, std::vector<HostBlock *>> free_; ///< free blocks by size
  std::deque<std::pair<EventHandle, HostBlock *>> pending_events_;
  std::vector<EventHandle> spare_events_;
  HostMemoryStats stats_;
};

} // namespace kiln::runtime::cuda
