// The CUDA caching allocator's graph pools (CachingAllocator.h; PyTorch's
// PrivatePool, beginAllocateToPool, endAllocateToPool, releasePool).
#include <stdexcept>
#include <string>

#include "DeviceCache.h"

namespace kiln::runtime::cuda {

void DeviceCache::begin_allocate_to_pool(GraphPoolId id, StreamHandle stream) {
  if (id == 0)
    throw std::invalid_argument("CachingAllocator::begin_allocate_to_pool: pool 0 is not a pool id; expected one "
                                "from new_graph_pool()");
  if (capture_targets_.count(stream))
    throw std::invalid_argument("CachingAllocator::begin_allocate_to_pool: stream " + std::to_string(stream) +
                                " of cuda:" + std::to_string(device_index_) +
                                " allocates to a graph pool already; expected end_allocate_to_pool first");
  std::unique_ptr<PrivatePool> &pool = private_pools_[id];
  if (!pool) {
    pool = std::make_unique<PrivatePool>();
    pool->id = id;
  }
  ++pool->use_count;
  capture_targets_[stream] = pool.get();
}

void DeviceCache::end_allocate_to_pool(StreamHandle stream) {
  if (!capture_targets_.erase(stream))
    throw std::invalid_argument("CachingAllocator::end_allocate_to_pool: stream " + std::to_string(stream) +
                                " of cuda:" + std::to_string(device_index_) +
                                " does not allocate to a graph pool; expected begin_allocate_to_pool first");
}

void DeviceCache::release_pool(GraphPoolId id) {
  auto it = private_pools_.find(id);
  if (it == private_pools_.end() || it->second->use_count == 0)
    throw std::invalid_argument("CachingAllocator::release_pool: graph pool " + std::to_string(id) + " of cuda:" +
                                std::to_string(device_index_) + " is not live (released already?)");
  PrivatePool *pool = it->second.get();
  if (--pool->use_count > 0)
    return;
  for (BlockPool &free_blocks : pool->free_blocks)
    for (auto block = free_blocks.begin(); block != free_blocks.end();) {
      Block *b = *block++;
      if (!b->is_split())
        release_segment(b);
    }
  delete_pool_if_empty(pool);
}

GraphPoolStats DeviceCache::graph_pool_stats(GraphPoolId id) const {
  GraphPoolStats out;
  auto it = private_pools_.find(id);
  if (it == private_pools_.end())
    return out;
  out.use_count = it->second->use_count;
  out.segments = it->second->segments;
  out.reserved_bytes = it->second->reserved_bytes;
  out.allocated_bytes = it->second->allocated_bytes;
  return out;
}

PrivatePool *DeviceCache::capture_target(StreamHandle stream) const {
  auto it = capture_targets_.find(stream);
  return it == capture_targets_.end() ? nullptr : it->second;
}

/// A freed block of a released pool: its segment goes back to the device
/// once wholly free, and the pool with its last segment.
void DeviceCache::release_unused_pool_segment(Block *block) {
  PrivatePool *pool = block->private_pool;
  if (pool->use_count > 0 || block->is_split())
    return;
  release_segment(block);
  delete_pool_if_empty(pool);
}

void DeviceCache::delete_pool_if_empty(PrivatePool *pool) {
  if (pool->use_count == 0 && pool->segments == 0)
    private_pools_.erase(pool->id);
}

} // namespace kiln::runtime::cuda
