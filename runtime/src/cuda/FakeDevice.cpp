// The fake CUDA device of the allocator tests (FakeDevice.h).
#include "kiln/runtime/cuda/FakeDevice.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace kiln::runtime::cuda {
namespace {

/// First fake device address: far from null, so a null check in the
/// allocator cannot be confused with a real block.
constexpr uintptr_t kFakeBaseAddress = uintptr_t{1} << 40;
/// Fake device addresses are aligned like cuMemAlloc's in practice (the
/// driver guarantees 256; it returns 512-aligned and larger in practice).
constexpr uintptr_t kFakeAlignment = 512;
/// Host blocks: one cache line, as the CPU allocator.
constexpr size_t kHostAlignment = 64;

std::string pointer_text(const void *ptr) { return std::to_string(reinterpret_cast<uintptr_t>(ptr)); }

} // namespace

FakeDevice::FakeDevice(size_t capacity_bytes) : capacity_(capacity_bytes), next_address_(kFakeBaseAddress) {}

FakeDevice::~FakeDevice() {
  for (auto &[ptr, size] : host_blocks_)
    std::free(ptr);
}

void *FakeDevice::raw_allocate(size_t nbytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fail_next_ > 0 || nbytes > capacity_ - used_) {
    if (fail_next_ > 0)
      --fail_next_;
    ++raw_alloc_failures_;
    return nullptr;
  }
  uintptr_t address = next_address_;
  next_address_ += (nbytes + kFakeAlignment - 1) / kFakeAlignment * kFakeAlignment + kFakeAlignment;
  device_blocks_[address] = nbytes;
  used_ += nbytes;
  ++raw_allocs_;
  return reinterpret_cast<void *>(address);
}

void FakeDevice::raw_free(void *ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = device_blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == device_blocks_.end())
    throw std::invalid_argument("FakeDevice::raw_free: " + pointer_text(ptr) +
                                " was not returned by raw_allocate (or was freed twice)");
  used_ -= it->second;
  device_blocks_.erase(it);
  ++raw_frees_;
}

DeviceMemoryInfo FakeDevice::mem_get_info() {
  std::lock_guard<std::mutex> lock(mutex_);
  return {capacity_ - used_, capacity_};
}

void *FakeDevice::host_allocate(size_t nbytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_next_host_ > 0) {
      --fail_next_host_;
      return nullptr;
    }
  }
  size_t rounded = (nbytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void *ptr = std::aligned_alloc(kHostAlignment, rounded == 0 ? kHostAlignment : rounded);
  if (!ptr)
    return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  host_blocks_[ptr] = nbytes;
  ++host_allocs_;
  return ptr;
}

void FakeDevice::host_free(void *ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = host_blocks_.find(ptr);
    if (it == host_blocks_.end())
      throw std::invalid_argument("FakeDevice::host_free: " + pointer_text(ptr) +
                                  " was not returned by host_allocate (or was freed twice)");
    host_blocks_.erase(it);
    ++host_frees_;
  }
  std::free(ptr);
}

FakeDevice::FakeEvent &FakeDevice::event_at(EventHandle event) {
  auto it = events_.find(event);
  if (it == events_.end())
    throw std::invalid_argument("FakeDevice: event " + std::to_string(event) +
                                " was not created by event_create (or was destroyed)");
  return it->second;
}

EventHandle FakeDevice::event_create() {
  std::lock_guard<std::mutex> lock(mutex_);
  EventHandle event = next_event_++;
  events_[event] = FakeEvent{};
  ++events_created_;
  return event;
}

void FakeDevice::event_record(EventHandle event, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  FakeEvent &e = event_at(event);
  e = FakeEvent{stream, true, false};
  ++event_records_;
}

bool FakeDevice::event_query(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  return event_at(event).completed;
}

void FakeDevice::event_synchronize(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  event_at(event).completed = true;
  ++event_synchronizes_;
}

void FakeDevice::event_destroy(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  event_at(event);
  events_.erase(event);
}

void FakeDevice::complete_stream(StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto &[handle, e] : events_)
    if (e.recorded && e.stream == stream)
      e.completed = true;
}

void FakeDevice::complete_all() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto &[handle, e] : events_)
    e.completed = true;
}

void FakeDevice::fail_next_allocations(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_next_ = count;
}

void FakeDevice::fail_next_host_allocations(int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail_next_host_ = count;
}

size_t FakeDevice::used_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_;
}

#define KILN_FAKE_COUNTER(name, field)                                                                                 \
  int64_t FakeDevice::name() const {                                                                                   \
    std::lock_guard<std::mutex> lock(mutex_);                                                                          \
    return field;                                                                                                      \
  }
KILN_FAKE_COUNTER(num_raw_allocs, raw_allocs_)
KILN_FAKE_COUNTER(num_raw_alloc_failures, raw_alloc_failures_)
KILN_FAKE_COUNTER(num_raw_frees, raw_frees_)
KILN_FAKE_COUNTER(num_host_allocs, host_allocs_)
KILN_FAKE_COUNTER(num_host_frees, host_frees_)
KILN_FAKE_COUNTER(num_events_created, events_created_)
KILN_FAKE_COUNTER(num_events_live, static_cast<int64_t>(events_.size()))
KILN_FAKE_COUNTER(num_event_records, event_records_)
KILN_FAKE_COUNTER(num_event_synchronizes, event_synchronizes_)
#undef KILN_FAKE_COUNTER

} // namespace kiln::runtime::cuda
