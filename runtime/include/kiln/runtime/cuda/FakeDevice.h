// kiln/runtime/cuda/FakeDevice.h - a DeviceMemory for tests: a device of a
// chosen capacity that fails when full, counts every raw call, and whose
// events complete only when the test says so.
//
//   FakeDevice dev(64 << 20);                  // a 64 MiB device
//   CachingAllocator alloc(dev);
//   void *p = alloc.malloc(1000, /*stream=*/1);  // dev.num_raw_allocs() == 1
//   alloc.record_stream(p, 2);
//   alloc.free(p);                             // an event recorded on stream 2
//   dev.complete_stream(2);                    // the stream's work "finished"
//
// Device memory is address space only: raw_allocate hands out fresh,
// 512-byte aligned addresses that are never reused and never dereferenced
// (the allocator must not touch device memory). Host memory is real
// (aligned_alloc), so pinned buffers can be written.
#pragma once

#include <map>
#include <mutex>
#include <vector>

#include "kiln/runtime/cuda/DeviceMemory.h"

namespace kiln::runtime::cuda {

class FakeDevice final : public DeviceMemory {
public:
  /// A device of `capacity_bytes` bytes of device memory.
  explicit FakeDevice(size_t capacity_bytes);
  ~FakeDevice() override;

  void *raw_allocate(size_t nbytes) override;
  /// Throws std::invalid_argument for a pointer raw_allocate did not return.
  void raw_free(void *ptr) override;
  DeviceMemoryInfo mem_get_info() override;
  void *host_allocate(size_t nbytes) override;
  /// Throws std::invalid_argument for a pointer host_allocate did not return.
  void host_free(void *ptr) override;
  EventHandle event_create() override;
  void event_record(EventHandle event, StreamHandle stream) override;
  bool event_query(EventHandle event) override;
  /// Completes the event (on the fake, "waiting" finishes the work).
  void event_synchronize(EventHandle event) override;
  void event_destroy(EventHandle event) override;

  /// Completes every event recorded on `stream` so far.
  void complete_stream(StreamHandle stream);
  /// Completes every recorded event.
  void complete_all();
  /// Makes the next `count` raw_allocate calls fail as if the device were
  /// full (other processes taking memory).
  void fail_next_allocations(int count);
  /// Makes the next `count` host_allocate calls fail (the system refusing
  /// more page-locked memory).
  void fail_next_host_allocations(int count);

  /// Bytes handed out by raw_allocate and not freed.
  size_t used_bytes() const;
  size_t capacity_bytes() const { return capacity_; }
  int64_t num_raw_allocs() const; ///< successful raw_allocate calls
  int64_t num_raw_alloc_failures() const;
  int64_t num_raw_frees() const;
  int64_t num_host_allocs() const;
  int64_t num_host_frees() const;
  int64_t num_events_created() const;
  int64_t num_events_live() const; ///< created and not destroyed
  int64_t num_event_records() const;
  int64_t num_event_synchronizes() const;

private:
  struct FakeEvent {
    StreamHandle stream = kDefaultStream;
    bool recorded = false;
    bool completed = true; // a never-recorded event has "completed" (cuEventQuery)
  };
  FakeEvent &event_at(EventHandle event);

  mutable std::mutex mutex_;
  size_t capacity_;
  size_t used_ = 0;
  uintptr_t next_address_;
  std::map<uintptr_t, size_t> device_blocks_;
  std::map<void *, size_t> host_blocks_;
  std::map<EventHandle, FakeEvent> events_;
  EventHandle next_event_ = 1;
  int fail_next_ = 0;
  int fail_next_host_ = 0;
  int64_t raw_allocs_ = 0, raw_alloc_failures_ = 0, raw_frees_ = 0;
  int64_t host_allocs_ = 0, host_frees_ = 0;
  int64_t events_created_ = 0, event_records_ = 0, event_synchronizes_ = 0;
};

} // namespace kiln::runtime::cuda
