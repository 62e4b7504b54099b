// Device memory of the simulator: host memory whose out-of-bounds accesses
// fault. Each allocation sits right before a PROT_NONE guard page (and
// after one), so a kernel's store one element past the end faults, and the
// simulator reports the kernel, block and thread and the address relative
// to the nearest allocation (runtime/src/sim/README.md, "memory checks").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::runtime::sim {

/// Alignment of allocate(): 16 bytes (a float4 / 16-byte vector load).
/// An overrun faults at once when `bytes` is a multiple of it; otherwise
/// only past the padding up to it.
inline constexpr size_t kAllocationAlignment = 16;

/// `bytes` of zero-filled device memory between guard pages, registered
/// under `label` (the name in fault reports). Throws std::bad_alloc when
/// the mapping fails. bytes 0 gives a valid, unusable pointer.
void *allocate(size_t bytes, const std::string &label = "");
/// Frees memory from allocate(); nullptr is ignored; anything else throws
/// std::invalid_argument.
void deallocate(void *ptr);

/// Registers memory the simulator did not allocate (an allocator hook: a
/// caching allocator's segment, a host buffer) so fault reports can name
/// it. No guard pages: overruns into neighbouring memory are not caught.
void register_allocation(const void *base, size_t bytes, const std::string &label);
/// Forgets a registration (no-op for an unknown base).
void unregister_allocation(const void *base);

/// Where `address` lies relative to the known allocations, for messages:
/// "4 bytes past the end of allocation 'out' (0x7f.., 4096 bytes)",
/// "12 bytes into allocation 'x' ...", or "not in any simulator allocation".
std::string describe_address(uintptr_t address);

} // namespace kiln::runtime::sim
