// The CUDA caching allocator's malloc and free: best fit, split, merge
// (DeviceCache.h; the rules are PyTorch's c10/cuda/CUDACachingAllocator.cpp).
#include "DeviceCache.h"

#include <stdexcept>
#include <string>
#include <tuple>

namespace kiln::runtime::cuda {

bool BlockBestFit::operator()(const Block *a, const Block *b) const {
  return std::tie(a->stream, a->size, a->address) < std::tie(b->stream, b->size, b->address);
}

DeviceCache::DeviceCache(DeviceMemory &device, int device_index, const AllocatorOptions &options)
    : device_(device), device_index_(device_index), options_(options) {}

Block *DeviceCache::malloc(size_t nbytes, StreamHandle stream) {
  // Blocks whose cross-stream uses have finished go back to the pools first
  // (not during a capture: PyTorch does not query events then either).
  if (capture_targets_.empty())
    process_events();
  Request r;
  r.requested = nbytes;
  r.size = round_size(nbytes);
  r.stream = stream;
  r.pool = pool_of(r.size);
  r.segment = segment_size(r.size);
  r.private_pool = capture_target(stream);
  Block *block = take_free_block(r);
  if (block)
    ++stats_.num_cache_hits;
  else
    block = allocate_segment_with_retry(r);
  if (should_split(block->size, r.size, r.pool, options_.max_split_size))
    block = split_block(block, r.size);
  mark_allocated(block, r);
  return block;
}

/// The smallest free block of the request's pool and stream that fits
/// (PyTorch's get_free_block), taken out of the pool; nullptr when none.
/// With max_split_size set, an oversize block serves only an oversize
/// request that it exceeds by less than kLargeBuffer.
Block *DeviceCache::take_free_block(const Request &r) {
  BlockPool &free_blocks = free_list(r.private_pool, r.pool);
  Block key;
  key.stream = r.stream;
  key.size = r.size;
  key.address = 0;
  auto it = free_blocks.lower_bound(&key);
  if (it == free_blocks.end() || (*it)->stream != r.stream)
    return nullptr;
  Block *block = *it;
  bool oversize_request = r.size >= options_.max_split_size;
  bool oversize_block = block->size >= options_.max_split_size;
  if (!oversize_request && oversize_block)
    return nullptr;
  if (oversize_request && block->size >= r.size + kLargeBuffer)
    return nullptr;
  free_blocks.erase(it);
  return block;
}

/// A new segment for the request as one free block (not in a pool), or
/// nullptr when the device has no room (PyTorch's alloc_block).
Block *DeviceCache::allocate_segment(const Request &r, bool is_retry) {
  if (is_retry)
    ++stats_.num_alloc_retries;
  void *ptr = device_.raw_allocate(r.segment);
  if (!ptr)
    return nullptr;
  Block *block = new Block;
  block->stream = r.stream;
  block->size = r.segment;
  block->address = reinterpret_cast<uintptr_t>(ptr);
  block->pool = r.pool;
  block->private_pool = r.private_pool;
  if (PrivatePool *p = r.private_pool) {
    ++p->segments;
    p->reserved_bytes += static_cast<int64_t>(r.segment);
    stats_.graph_pool_reserved_bytes.increase(static_cast<int64_t>(r.segment));
  }
  stats_.segment.add(r.pool, 1);
  stats_.reserved_bytes.add(r.pool, static_cast<int64_t>(r.segment));
  ++stats_.num_device_alloc;
  return block;
}

/// allocate_segment; when the device is full, release the cache and retry
/// once; then OutOfMemoryError.
Block *DeviceCache::allocate_segment_with_retry(const Request &r) {
  if (Block *block = allocate_segment(r, /*is_retry=*/false))
    return block;
  // cuMemFree during a capture is illegal (it synchronizes): no release
  // and retry then (PyTorch's captures_underway check).
  if (!capture_targets_.empty())
    throw_out_of_memory(r);
  release_cached_blocks();
  if (Block *block = allocate_segment(r, /*is_retry=*/true))
    return block;
  throw_out_of_memory(r);
}

/// Cuts the first `size` bytes off `block` as a new block, which is
/// returned; the rest stays `block` and goes (back) to its pool.
Block *DeviceCache::split_block(Block *block, size_t size) {
  Block *front = new Block;
  front->stream = block->stream;
  front->size = size;
  front->address = block->address;
  front->pool = block->pool;
  front->private_pool = block->private_pool;
  front->prev = block->prev;
  if (front->prev)
    front->prev->next = front;
  front->next = block;
  block->prev = front;
  block->address += size;
  block->size -= size;
  free_list(block).insert(block);
  return front;
}

void DeviceCache::mark_allocated(Block *block, const Request &r) {
  block->allocated = true;
  block->requested_size = r.requested;
  allocated_[block->address] = block;
  active_.insert(block);
  const auto bytes = static_cast<int64_t>(block->size);
  stats_.allocation.add(block->pool, 1);
  stats_.allocated_bytes.add(block->pool, bytes);
  stats_.active.add(block->pool, 1);
  stats_.active_bytes.add(block->pool, bytes);
  stats_.requested_bytes.add(block->pool, static_cast<int64_t>(r.requested));
  if (PrivatePool *p = block->private_pool) {
    p->allocated_bytes += bytes;
    stats_.graph_pool_allocated_bytes.increase(bytes);
  }
  ++stats_.num_allocs;
}

Block *DeviceCache::allocated_block(void *ptr, const char *what) const {
  auto it = allocated_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocated_.end())
    throw std::invalid_argument(std::string("CachingAllocator::") + what + ": pointer " +
                                std::to_string(reinterpret_cast<uintptr_t>(ptr)) +
                                " is not allocated by cuda:" + std::to_string(device_index_) +
                                "'s caching allocator (freed already, or from another allocator); pass a "
                                "pointer its malloc returned");
  return it->second;
}

void DeviceCache::free(void *ptr) {
  Block *block = allocated_block(ptr, "free");
  allocated_.erase(block->address);
  block->allocated = false;
  stats_.allocation.add(block->pool, -1);
  stats_.allocated_bytes.add(block->pool, -static_cast<int64_t>(block->size));
  if (PrivatePool *p = block->private_pool) {
    p->allocated_bytes -= static_cast<int64_t>(block->size);
    stats_.graph_pool_allocated_bytes.decrease(static_cast<int64_t>(block->size));
  }
  ++stats_.num_frees;
  if (block->stream_uses.empty())
    free_block(block);
  else
    insert_events(block);
}

/// Returns an inactive block to its pool, merged with its free neighbours
/// (PyTorch's free_block).
void DeviceCache::free_block(Block *block) {
  const auto bytes = static_cast<int64_t>(block->size);
  const auto requested = static_cast<int64_t>(block->requested_size);
  active_.erase(block);
  block->requested_size = 0;
  try_merge(block, block->prev);
  try_merge(block, block->next);
  free_list(block).insert(block);
  stats_.active.add(block->pool, -1);
  stats_.active_bytes.add(block->pool, -bytes);
  stats_.requested_bytes.add(block->pool, -requested);
  if (block->private_pool)
    release_unused_pool_segment(block);
}

/// Absorbs `src` (a neighbour of `dst` in its segment) into `dst` when src
/// is free and has no pending uses (PyTorch's try_merge_blocks).
void DeviceCache::try_merge(Block *dst, Block *src) {
  if (!src || src->allocated || src->event_count > 0 || !src->stream_uses.empty())
    return;
  free_list(src).erase(src);
  if (dst->prev == src) { // [src dst]
    dst->address = src->address;
    dst->prev = src->prev;
    if (dst->prev)
      dst->prev->next = dst;
  } else { // [dst src]
    dst->next = src->next;
    if (dst->next)
      dst->next->prev = dst;
  }
  dst->size += src->size;
  delete src;
}

} // namespace kiln::runtime::cuda
