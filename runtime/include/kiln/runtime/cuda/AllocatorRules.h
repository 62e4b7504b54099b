// kiln/runtime/cuda/AllocatorRules.h - the size rules of the CUDA caching
// allocator, as PyTorch's c10/cuda/CUDACachingAllocator.cpp writes them, and
// its one configuration knob.
//
// A request of n bytes is rounded to a multiple of 512 (round_size). Rounded
// sizes up to 1 MiB come from the small pool, whose segments are 2 MiB; the
// rest from the large pool, whose segments are 20 MiB for requests under
// 10 MiB and the request rounded up to 2 MiB otherwise (segment_size). A
// cached block larger than the request is split when the remainder is worth
// keeping (should_split). All sizes are in bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace kiln::runtime::cuda {

/// Every block size is a multiple of this: it keeps every block 512-byte
/// aligned inside its segment (vector loads, cuBLAS workspaces) and bounds
/// the number of distinct sizes the pools hold. (PyTorch's kMinBlockSize.)
constexpr size_t kMinBlockSize = 512;
/// The largest "small" request: tensors up to 1 MiB share small segments,
/// so thousands of small tensors do not each cost a cuMemAlloc. (kSmallSize.)
constexpr size_t kSmallSize = size_t{1} << 20;
/// Small requests are packed into 2 MiB segments: one GPU large page, the
/// driver's allocation granularity. (kSmallBuffer.)
constexpr size_t kSmallBuffer = size_t{2} << 20;
/// Requests below 10 MiB (and above kSmallSize) share a kLargeBuffer
/// segment instead of one cuMemAlloc each. (kMinLargeAlloc.)
constexpr size_t kMinLargeAlloc = size_t{10} << 20;
/// The shared segment of mid-sized requests: 20 MiB holds at least two of
/// them, and a tail of it serves later ones. (kLargeBuffer.)
constexpr size_t kLargeBuffer = size_t{20} << 20;
/// Requests of 10 MiB and more get a segment of their own, rounded up to
/// 2 MiB pages (the driver rounds to its page anyway). (kRoundLarge.)
constexpr size_t kRoundLarge = size_t{2} << 20;
/// No block size limit for splitting by default (PyTorch's max_split_size
/// default: unlimited).
constexpr size_t kNoMaxSplitSize = std::numeric_limits<size_t>::max();

/// Which pool a rounded size is served from.
enum class PoolKind : uint8_t { Small = 0, Large = 1 };

/// `nbytes` rounded up to a multiple of kMinBlockSize; 0 becomes
/// kMinBlockSize, so every allocation has a distinct address (the runtime's
/// Allocator contract; PyTorch returns nullptr for 0 bytes instead).
size_t round_size(size_t nbytes);

/// The pool of a rounded size: Small when <= kSmallSize.
PoolKind pool_of(size_t rounded_size);

/// The segment size cuMemAlloc'ed when no cached block fits a rounded size
/// (PyTorch's get_allocation_size): kSmallBuffer for small sizes,
/// kLargeBuffer below kMinLargeAlloc, else the size rounded up to
/// kRoundLarge.
size_t segment_size(size_t rounded_size);

/// Whether a free block of `block_size` bytes serving `rounded_size` is split
/// (PyTorch's should_split): in the small pool when the remainder is at
/// least kMinBlockSize; in the large pool when the remainder is more than
/// kSmallSize (a smaller remainder could only serve small requests, which
/// never come from the large pool) and the request is below
/// `max_split_size` (oversize blocks are handed out whole).
bool should_split(size_t block_size, size_t rounded_size, PoolKind pool, size_t max_split_size);

/// Allocator configuration (PyTorch's PYTORCH_CUDA_ALLOC_CONF, one knob).
struct AllocatorOptions {
  /// Blocks at least this large are never split, and serve only requests
  /// of at least this size, at most kLargeBuffer smaller than the block
  /// (limits fragmentation by big tensors). Default: unlimited.
  size_t max_split_size = kNoMaxSplitSize;
};

/// Parses "max_split_size_mb:N" (PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax;
/// an empty string gives the defaults). N must be more than 20
/// (kLargeBuffer in MiB), as PyTorch requires. Throws std::invalid_argument
/// naming the bad key or value and what is accepted.
AllocatorOptions parse_allocator_conf(const std::string &conf);

/// parse_allocator_conf($KILN_CUDA_ALLOC_CONF), or the defaults when unset.
AllocatorOptions allocator_options_from_env();

/// The name of the environment variable read by allocator_options_from_env.
constexpr const char *kAllocConfEnv = "KILN_CUDA_ALLOC_CONF";

/// "512 bytes", "1.50 KiB", "20.00 MiB", "80.00 GiB" (PyTorch's format_size:
/// bytes below 1 KiB, else two decimals of the largest unit below the size).
std::string format_bytes(uint64_t nbytes);

} // namespace kiln::runtime::cuda
