// Counters and the out-of-memory message of the CUDA caching allocator
// (AllocatorStats.h).
#include "kiln/runtime/cuda/AllocatorStats.h"

#include <algorithm>

namespace kiln::runtime::cuda {
namespace {

/// The message of OutOfMemoryError, after PyTorch's (CUDACachingAllocator.cpp,
/// malloc): what was asked, what the device has, what the allocator holds,
/// and what to try.
std::string out_of_memory_message(const OutOfMemoryError::Report &r) {
  int64_t cached = r.reserved_bytes - r.allocated_bytes;
  std::string text = "CUDA out of memory on cuda:" + std::to_string(r.device) + ". Tried to allocate " +
                     format_bytes(r.segment_bytes) + " (a request of " + format_bytes(r.requested_bytes) +
                     "). The device has a total capacity of " + format_bytes(r.device_memory.total_bytes) +
                     " of which " + format_bytes(r.device_memory.free_bytes) + " is free. Of the memory Kiln holds, " +
                     format_bytes(static_cast<uint64_t>(r.allocated_bytes)) + " is allocated by Kiln and " +
                     format_bytes(static_cast<uint64_t>(cached)) + " is reserved by Kiln but unallocated.";
  text += " To use less: a smaller batch size; free tensors you no longer need, then empty_cache() returns "
          "the cached memory to the device; kiln::compile with CompileOptions::memory_budget below 1 recomputes "
          "activations instead of saving them.";
  text += " If reserved but unallocated memory is large, set " + std::string(kAllocConfEnv) +
          "=max_split_size_mb:<N> (N > 20) so big free blocks are not split (less fragmentation).";
  return text;
}

} // namespace

void Stat::increase(int64_t amount) {
  current += amount;
  peak = std::max(peak, current);
  allocated += amount;
}

void Stat::decrease(int64_t amount) {
  current -= amount;
  freed += amount;
}

void StatByPool::add(PoolKind pool, int64_t amount) {
  if (amount >= 0) {
    all.increase(amount);
    of(pool).increase(amount);
  } else {
    all.decrease(-amount);
    of(pool).decrease(-amount);
  }
}

void StatByPool::reset_peak() {
  all.reset_peak();
  small.reset_peak();
  large.reset_peak();
}

void CudaMemoryStats::reset_peak() {
  for (StatByPool *s :
       {&allocation, &segment, &active, &allocated_bytes, &reserved_bytes, &active_bytes, &requested_bytes})
    s->reset_peak();
  graph_pool_reserved_bytes.reset_peak();
  graph_pool_allocated_bytes.reset_peak();
}

OutOfMemoryError::OutOfMemoryError(const Report &report)
    : std::runtime_error(out_of_memory_message(report)), report_(report) {}

} // namespace kiln::runtime::cuda
