// The CUDA caching allocator's cross-stream uses (events), cache release,
// out of memory and snapshots (DeviceCache.h; PyTorch's
// c10/cuda/CUDACachingAllocator.cpp: insert_events, process_events,
// synchronize_and_free_events, release_cached_blocks).
#include <algorithm>

#include "DeviceCache.h"

namespace kiln::runtime::cuda {

DeviceCache::~DeviceCache() {
  try {
    release_cached_blocks();
    destroy_spare_events();
  } catch (...) {
    // A destructor must not throw; what could not be returned stays with the device.
  }
  // Segments still holding allocated blocks are left to the device: their
  // memory may still be in use. Only the bookkeeping goes.
  for (Block *block : active_)
    delete block;
  for (BlockPool &free_blocks : pools_)
    for (Block *block : free_blocks)
      delete block;
  // Graph pools: free whole segments go back to the device; the rest is
  // bookkeeping only, as above.
  for (auto &[id, private_pool] : private_pools_)
    for (BlockPool &free_blocks : private_pool->free_blocks)
      for (Block *block : free_blocks) {
        if (!block->is_split()) {
          try {
            device_.raw_free(reinterpret_cast<void *>(block->address));
          } catch (...) {
          }
        }
        delete block;
      }
}

void DeviceCache::record_stream(void *ptr, StreamHandle stream) {
  Block *block = allocated_block(ptr, "record_stream");
  // Uses on the allocation stream are ordered with its reuse already.
  if (stream == block->stream)
    return;
  block->stream_uses.insert(stream);
}

void DeviceCache::empty_cache() {
  if (!capture_targets_.empty())
    return; // cuMemFree during a capture is illegal: the cache stays until it ends
  release_cached_blocks();
  destroy_spare_events();
}

EventHandle DeviceCache::take_event() {
  if (spare_events_.empty())
    return device_.event_create();
  EventHandle event = spare_events_.back();
  spare_events_.pop_back();
  return event;
}

void DeviceCache::destroy_spare_events() {
  for (EventHandle event : spare_events_)
    device_.event_destroy(event);
  spare_events_.clear();
}

/// A freed block used on other streams: one event per stream marks the end
/// of those uses; the block returns to its pool when all have completed.
void DeviceCache::insert_events(Block *block) {
  std::set<StreamHandle> streams;
  streams.swap(block->stream_uses);
  for (StreamHandle stream : streams) {
    EventHandle event = take_event();
    device_.event_record(event, stream);
    ++block->event_count;
    pending_events_[stream].emplace_back(event, block);
  }
}

/// Completed events free their blocks. Each stream's events complete in
/// record order, so a stream's queue is read up to its first pending event;
/// one queue per stream keeps a slow stream from holding up the others.
void DeviceCache::process_events() {
  for (auto it = pending_events_.begin(); it != pending_events_.end();) {
    auto &queue = it->second;
    while (!queue.empty() && device_.event_query(queue.front().first)) {
      auto [event, block] = queue.front();
      queue.pop_front();
      spare_events_.push_back(event);
      if (--block->event_count == 0)
        free_block(block);
    }
    it = queue.empty() ? pending_events_.erase(it) : std::next(it);
  }
}

/// Waits for every pending event and frees their blocks (before releasing
/// the cache, so those blocks can be released too). Not during a capture
/// (synchronizing is illegal then; PyTorch skips it too).
void DeviceCache::synchronize_and_free_events() {
  if (!capture_targets_.empty())
    return;
  ++stats_.num_sync_all_streams;
  for (auto &[stream, queue] : pending_events_) {
    for (auto [event, block] : queue) {
      device_.event_synchronize(event);
      spare_events_.push_back(event);
      if (--block->event_count == 0)
        free_block(block);
    }
  }
  pending_events_.clear();
}

/// Returns every free block that is a whole segment (not split) to the
/// device. Split segments keep their memory: part of them is in use.
void DeviceCache::release_cached_blocks() {
  synchronize_and_free_events();
  for (BlockPool &free_blocks : pools_) {
    for (auto it = free_blocks.begin(); it != free_blocks.end();) {
      Block *block = *it++;
      if (!block->is_split())
        release_segment(block);
    }
  }
}

void DeviceCache::release_segment(Block *block) {
  device_.raw_free(reinterpret_cast<void *>(block->address));
  free_list(block).erase(block);
  if (PrivatePool *p = block->private_pool) {
    --p->segments;
    p->reserved_bytes -= static_cast<int64_t>(block->size);
    stats_.graph_pool_reserved_bytes.decrease(static_cast<int64_t>(block->size));
  }
  stats_.segment.add(block->pool, -1);
  stats_.reserved_bytes.add(block->pool, -static_cast<int64_t>(block->size));
  ++stats_.num_device_free;
  delete block;
}

void DeviceCache::throw_out_of_memory(const Request &r) {
  ++stats_.num_ooms;
  OutOfMemoryError::Report report;
  report.device = device_index_;
  report.requested_bytes = r.requested;
  report.segment_bytes = r.segment;
  report.device_memory = device_.mem_get_info();
  report.allocated_bytes = stats_.allocated_bytes.all.current;
  report.reserved_bytes = stats_.reserved_bytes.all.current;
  throw OutOfMemoryError(report);
}

namespace {

BlockInfo block_info(const Block &block) {
  BlockInfo info;
  info.address = block.address;
  info.size = block.size;
  info.requested_size = block.requested_size;
  info.allocated = block.allocated;
  info.active = block.allocated || block.event_count > 0;
  return info;
}

SegmentInfo segment_info(const Block *head) {
  SegmentInfo segment;
  segment.address = head->address;
  segment.stream = head->stream;
  segment.pool = head->pool;
  for (const Block *block = head; block; block = block->next) {
    segment.blocks.push_back(block_info(*block));
    segment.total_size += block->size;
  }
  return segment;
}

} // namespace

std::vector<SegmentInfo> DeviceCache::snapshot() const {
  std::vector<SegmentInfo> segments;
  auto add_if_head = [&segments](const Block *block) {
    if (!block->prev)
      segments.push_back(segment_info(block));
  };
  for (const BlockPool &free_blocks : pools_)
    for (const Block *block : free_blocks)
      add_if_head(block);
  for (const auto &[id, private_pool] : private_pools_)
    for (const BlockPool &free_blocks : private_pool->free_blocks)
      for (const Block *block : free_blocks)
        add_if_head(block);
  for (const Block *block : active_)
    add_if_head(block);
  std::sort(segments.begin(), segments.end(),
            [](const SegmentInfo &a, const SegmentInfo &b) { return a.address < b.address; });
  return segments;
}

} // namespace kiln::runtime::cuda
