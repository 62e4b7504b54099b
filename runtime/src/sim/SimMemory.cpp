// Guarded device memory and the allocation registry (SimMemory.h).
#include "kiln/runtime/sim/SimMemory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>

namespace kiln::runtime::sim {
namespace {

struct Allocation {
  size_t bytes = 0;
  std::string label;
  // The whole mapping (guards included) when the simulator allocated it.
  void *mapping = nullptr;
  size_t mapping_bytes = 0;
};

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> by_base;
};

Registry &registry() {
  static Registry *r = new Registry; // never destroyed: kernels may fault during exit
  return *r;
}

size_t page_size() {
  static const size_t size = size_t(sysconf(_SC_PAGESIZE));
  return size;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string hex(uintptr_t v) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

std::string describe(uintptr_t base, const Allocation &a) {
  std::string name = a.label.empty() ? "allocation" : "allocation '" + a.label + "'";
  return name + " (" + hex(base) + ", " + std::to_string(a.bytes) + " bytes)";
}

} // namespace

void *allocate(size_t bytes, const std::string &label) {
  const size_t page = page_size();
  const size_t body = round_up(round_up(bytes, kAllocationAlignment), page);
  const size_t total = body + 2 * page; // a guard page on either side
  void *mapping = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) throw std::bad_alloc();
  char *body_start = static_cast<char *>(mapping) + page;
  if (body > 0 && mprotect(body_start, body, PROT_READ | PROT_WRITE) != 0) {
    munmap(mapping, total);
    throw std::bad_alloc();
  }
  // The data ends where the trailing guard page starts: one past the end faults.
  char *ptr = body_start + body - round_up(bytes, kAllocationAlignment);
  Allocation a{bytes, label, mapping, total};
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.by_base[reinterpret_cast<uintptr_t>(ptr)] = std::move(a);
  return ptr;
}

void deallocate(void *ptr) {
  if (!ptr) return;
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_base.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == r.by_base.end() || !it->second.mapping)
    throw std::invalid_argument("cuda-sim deallocate: " + hex(reinterpret_cast<uintptr_t>(ptr)) +
                                " was not returned by sim::allocate");
  munmap(it->second.mapping, it->second.mapping_bytes);
  r.by_base.erase(it);
}

void register_allocation(const void *base, size_t bytes, const std::string &label) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.by_base[reinterpret_cast<uintptr_t>(base)] = Allocation{bytes, label, nullptr, 0};
}

void unregister_allocation(const void *base) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_base.find(reinterpret_cast<uintptr_t>(base));
  if (it != r.by_base.end() && !it->second.mapping) r.by_base.erase(it);
}

std::string describe_address(uintptr_t address) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto after = r.by_base.upper_bound(address);
  std::string below, above;
  uintptr_t below_distance = UINTPTR_MAX, above_distance = UINTPTR_MAX;
  if (after != r.by_base.begin()) {
    auto at = std::prev(after);
    uintptr_t end = at->first + at->second.bytes;
    if (address < end)
      return std::to_string(address - at->first) + " bytes into " + describe(at->first, at->second);
    below_distance = address - end;
    below = std::to_string(below_distance) + " bytes past the end of " + describe(at->first, at->second);
  }
  if (after != r.by_base.end()) {
    above_distance = after->first - address;
    above = std::to_string(above_distance) + " bytes before the start of " + describe(after->first, after->second);
  }
  if (below.empty() && above.empty()) return "not in any simulator allocation";
  return below_distance <= above_distance ? below : above;
}

} // namespace kiln::runtime::sim
