// Pinned host memory, cached by power-of-two size and gated by events
// (CachingHostAllocator.h; PyTorch's CachingHostAllocator).
#include "kiln/runtime/cuda/CachingHostAllocator.h"

#include <stdexcept>

namespace kiln::runtime::cuda {

size_t round_host_size(size_t nbytes) {
  size_t size = 1;
  while (size < nbytes)
    size <<= 1;
  return size;
}

CachingHostAllocator::CachingHostAllocator(DeviceMemory &device) : device_(device) {}

CachingHostAllocator::~CachingHostAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    synchronize_events();
    release_free_blocks();
    for (EventHandle event : spare_events_)
      device_.event_destroy(event);
  } catch (...) {
    // A destructor must not throw; what could not be returned stays with the system.
  }
  // Blocks still allocated are left to their users; only the bookkeeping goes.
  for (auto &[ptr, block] : blocks_)
    delete block;
}

void *CachingHostAllocator::allocate(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  size_t size = round_host_size(nbytes);
  HostBlock *block = take_free_block(size);
  if (block)
    ++stats_.num_cache_hits;
  else
    block = allocate_block(size);
  block->allocated = true;
  stats_.allocated_bytes.increase(static_cast<int64_t>(size));
  ++stats_.num_allocs;
  return block->ptr;
}

CachingHostAllocator::HostBlock *CachingHostAllocator::take_free_block(size_t size) {
  auto it = free_.find(size);
  if (it == free_.end() || it->second.empty())
    return nullptr;
  HostBlock *block = it->second.back();
  it->second.pop_back();
  return block;
}

/// A new block from the system; when refused, the free blocks are returned
/// and the request retried once.
CachingHostAllocator::HostBlock *CachingHostAllocator::allocate_block(size_t size) {
  void *ptr = device_.host_allocate(size);
  if (!ptr) {
    release_free_blocks();
    ++stats_.num_alloc_retries;
    ptr = device_.host_allocate(size);
  }
  if (!ptr)
    throw HostOutOfMemoryError("pinned host memory: the system refused " + format_bytes(size) +
                               " of page-locked "
                               "memory; Kiln holds " +
                               format_bytes(static_cast<uint64_t>(stats_.reserved_bytes.current)) +
                               " of it. Pin less (smaller batches, fewer DataLoader workers with pin_memory) or "
                               "raise the locked-memory limit (ulimit -l)");
  auto *block = new HostBlock;
  block->ptr = ptr;
  block->size = size;
  blocks_[ptr] = block;
  stats_.reserved_bytes.increase(static_cast<int64_t>(size));
  ++stats_.num_host_alloc;
  return block;
}

CachingHostAllocator::HostBlock *CachingHostAllocator::allocated_block(void *ptr, const char *what) {
  auto it = blocks_.find(ptr);
  if (it == blocks_.end() || !it->second->allocated)
    throw std::invalid_argument(std::string("CachingHostAllocator::") + what + ": pointer " +
                                std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                                " is not allocated by this pinned host allocator (freed already, or from another "
                                "allocator); pass a pointer its allocate returned");
  return it->second;
}

void CachingHostAllocator::deallocate(void *ptr, size_t /*nbytes*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  HostBlock *block = allocated_block(ptr, "deallocate");
  block->allocated = false;
  stats_.allocated_bytes.decrease(static_cast<int64_t>(block->size));
  ++stats_.num_frees;
  if (block->streams.empty()) {
    free_[block->size].push_back(block);
    return;
  }
  for (StreamHandle stream : block->streams) {
    EventHandle event = take_event();
    device_.event_record(event, stream);
    ++block->event_count;
    pending_events_.emplace_back(event, block);
  }
  block->streams.clear();
}

/// A spare completed event, or a new one.
EventHandle CachingHostAllocator::take_event() {
  if (spare_events_.empty())
    return device_.event_create();
  EventHandle event = spare_events_.back();
  spare_events_.pop_back();
  return event;
}

void CachingHostAllocator::record_stream(void *ptr, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  allocated_block(ptr, "record_stream")->streams.insert(stream);
}

/// Completed events, oldest first, return their blocks to the free lists;
/// stops at the first pending one (PyTorch's host allocator does too).
void CachingHostAllocator::process_events() {
  while (!pending_events_.empty() && device_.event_query(pending_events_.front().first)) {
    auto [event, block] = pending_events_.front();
    pending_events_.pop_front();
    spare_events_.push_back(event);
    if (--block->event_count == 0)
      free_[block->size].push_back(block);
  }
}

void CachingHostAllocator::synchronize_events() {
  for (auto [event, block] : pending_events_) {
    device_.event_synchronize(event);
    spare_events_.push_back(event);
    if (--block->event_count == 0)
      free_[block->size].push_back(block);
  }
  pending_events_.clear();
}

void CachingHostAllocator::release_free_blocks() {
  for (auto &[size, list] : free_) {
    for (HostBlock *block : list) {
      device_.host_free(block->ptr);
      stats_.reserved_bytes.decrease(static_cast<int64_t>(block->size));
      ++stats_.num_host_free;
      blocks_.erase(block->ptr);
      delete block;
    }
  }
  free_.clear();
}

void CachingHostAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  release_free_blocks();
}

HostMemoryStats CachingHostAllocator::host_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

MemoryStats CachingHostAllocator::stats() const {
  HostMemoryStats s = host_stats();
  MemoryStats out;
  out.current_bytes = s.allocated_bytes.current;
  out.peak_bytes = s.allocated_bytes.peak;
  out.num_allocs = s.num_allocs;
  out.cached_bytes = s.reserved_bytes.current - s.allocated_bytes.current;
  out.cache_hits = s.num_cache_hits;
  return out;
}

void CachingHostAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.allocated_bytes.reset_peak();
  stats_.reserved_bytes.reset_peak();
}

} // namespace kiln::runtime::cuda
