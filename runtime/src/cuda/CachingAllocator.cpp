// The CUDA caching allocator's public face: the mutex around DeviceCache,
// and runtime::Allocator on the current stream (CachingAllocator.h).
#include "kiln/runtime/cuda/CachingAllocator.h"

#include "DeviceCache.h"
#include "kiln/runtime/cuda/CurrentStream.h"

namespace kiln::runtime::cuda {

CachingAllocator::CachingAllocator(DeviceMemory &device, int device_index, AllocatorOptions options)
    : device_index_(device_index), options_(options),
      cache_(std::make_unique<DeviceCache>(device, device_index, options)) {}

CachingAllocator::~CachingAllocator() = default;

void *CachingAllocator::malloc(size_t nbytes, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  return reinterpret_cast<void *>(cache_->malloc(nbytes, stream)->address);
}

void CachingAllocator::free(void *ptr) {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->free(ptr);
}

void CachingAllocator::record_stream(void *ptr, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->record_stream(ptr, stream);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->empty_cache();
}

CudaMemoryStats CachingAllocator::memory_stats() const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  return cache_->stats();
}

void CachingAllocator::reset_peak_memory_stats() {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->reset_peak();
}

std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  return cache_->snapshot();
}

GraphPoolId CachingAllocator::new_graph_pool() {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  return cache_->new_graph_pool();
}

void CachingAllocator::begin_allocate_to_pool(GraphPoolId pool, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->begin_allocate_to_pool(pool, stream);
}

void CachingAllocator::end_allocate_to_pool(StreamHandle stream) {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->end_allocate_to_pool(stream);
}

void CachingAllocator::release_pool(GraphPoolId pool) {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->release_pool(pool);
}

GraphPoolStats CachingAllocator::graph_pool_stats(GraphPoolId pool) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  return cache_->graph_pool_stats(pool);
}

void *CachingAllocator::allocate(size_t nbytes) { return malloc(nbytes, current_stream(device_index_)); }

void CachingAllocator::deallocate(void *ptr, size_t /*nbytes*/) { free(ptr); }

MemoryStats CachingAllocator::stats() const {
  CudaMemoryStats s = memory_stats();
  MemoryStats out;
  out.current_bytes = s.allocated_bytes.all.current;
  out.peak_bytes = s.allocated_bytes.all.peak;
  out.num_allocs = s.num_allocs;
  out.cached_bytes = s.reserved_bytes.all.current - s.allocated_bytes.all.current;
  out.cache_hits = s.num_cache_hits;
  return out;
}

} // namespace kiln::runtime::cuda
