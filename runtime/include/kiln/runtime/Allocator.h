// kiln/runtime/Allocator.h - device memory and its statistics.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/runtime/Device.h"

namespace kiln::runtime {

/// Byte counters of one allocator (units: bytes).
struct MemoryStats {
  int64_t current_bytes = 0;  ///< bytes allocated and not yet freed
  int64_t peak_bytes = 0;     ///< high-water mark of current_bytes since reset
  int64_t num_allocs = 0;     ///< allocations served since start
  int64_t cached_bytes = 0;   ///< freed blocks kept for reuse (not in current_bytes)
  int64_t cache_hits = 0;     ///< allocations served from the cache since start
};

/// An allocator for one device. Thread-safe.
class Allocator {
public:
  virtual ~Allocator() = default;
  /// Returns at least `nbytes` bytes (aligned to alignment()); never null.
  /// Throws std::bad_alloc when the system is out of memory.
  virtual void *allocate(size_t nbytes) = 0;
  /// Frees a pointer returned by allocate() with the same `nbytes`.
  virtual void deallocate(void *ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
  virtual size_t alignment() const = 0;
  virtual MemoryStats stats() const = 0;
  /// Sets peak_bytes to current_bytes (like torch.cuda.reset_peak_memory_stats).
  virtual void reset_peak_stats() = 0;
  /// Returns cached free blocks to the system (torch.cuda.empty_cache).
  virtual void empty_cache() {}
};

/// The process-wide CPU allocator: 64-byte aligned (one cache line, one
/// AVX-512 vector), with current/peak byte statistics. A caching allocator
/// for large blocks (>= 256 KiB, the ones glibc maps fresh from the kernel,
/// so every reuse would page-fault again): a freed block is kept in a free
/// list of its exact rounded size and handed to the next allocation of that
/// size (training steps and compiled runs repeat their sizes), as PyTorch's
/// caching allocators do. At most $KILN_CPU_CACHE_MB (default 1024) MiB
/// stay cached; beyond that blocks are freed. current_bytes/peak_bytes count
/// live allocations only ("allocated", not "reserved").
Allocator &cpu_allocator();

/// A refcounted allocation: what a tensor's Storage and the runtime's planned
/// buffers hold. Frees itself through its allocator.
class Buffer {
public:
  Buffer(Allocator &alloc, size_t nbytes);
  ~Buffer();
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;

  void *data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return alloc_.device(); }

  /// Write version: bumped by every in-place write through a tensor (and its
  /// views, which share the Buffer). Autograd compares it with the version
  /// recorded when a tensor was saved for backward.
  std::atomic<uint64_t> version{0};

  static std::shared_ptr<Buffer> make(size_t nbytes, Allocator &alloc = cpu_allocator()) {
    return std::make_shared<Buffer>(alloc, nbytes);
  }

private:
  Allocator &alloc_;
  void *data_;
  size_t nbytes_;
};

}  // namespace kiln::runtime
