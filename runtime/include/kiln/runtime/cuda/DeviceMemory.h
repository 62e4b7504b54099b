// kiln/runtime/cuda/DeviceMemory.h - what the caching allocators need from a
// CUDA device: raw device and pinned host memory, free/total memory, and
// events on streams. Nothing more, so the allocators' bookkeeping runs
// against a fake device in tests (FakeDevice.h) and against the driver API
// on a GPU.
//
// The driver implementation maps one to one onto the driver API:
//   raw_allocate      cuMemAlloc            (null on CUDA_ERROR_OUT_OF_MEMORY)
//   raw_free          cuMemFree
//   mem_get_info      cuMemGetInfo
//   host_allocate     cuMemHostAlloc        (page-locked; null when refused)
//   host_free         cuMemFreeHost
//   event_create      cuEventCreate(CU_EVENT_DISABLE_TIMING)
//   event_record      cuEventRecord
//   event_query       cuEventQuery          (CUDA_SUCCESS -> true,
//                                            CUDA_ERROR_NOT_READY -> false)
//   event_synchronize cuEventSynchronize
//   event_destroy     cuEventDestroy
// Any other driver error is thrown as std::runtime_error naming the call
// and the CUresult (out of memory is not an error here: the allocator frees
// its cache and retries, as PyTorch's CUDACachingAllocator does).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::runtime::cuda {

/// An opaque CUDA stream (a CUstream cast to an integer). 0 is the default
/// (legacy NULL) stream. The allocators only compare and hand these back to
/// the device; they never dereference them.
using StreamHandle = uintptr_t;

/// The default stream (CUDA's NULL stream).
constexpr StreamHandle kDefaultStream = 0;

/// An opaque CUDA event (a CUevent cast to an integer); 0 is never a valid
/// event.
using EventHandle = uintptr_t;

/// Free and total memory of a device, in bytes (cuMemGetInfo).
struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

/// One device's memory and event primitives. Implementations must be
/// thread-safe (the driver API is); the allocators call them with their own
/// mutex held.
class DeviceMemory {
public:
  virtual ~DeviceMemory() = default;

  /// `nbytes` bytes of device memory, aligned to at least 256 bytes (the
  /// driver's guarantee), or nullptr when the device is out of memory.
  /// Never throws for out of memory.
  virtual void *raw_allocate(size_t nbytes) = 0;
  /// Returns memory from raw_allocate to the device.
  virtual void raw_free(void *ptr) = 0;
  /// The device's free and total memory now.
  virtual DeviceMemoryInfo mem_get_info() = 0;

  /// `nbytes` bytes of page-locked host memory (what async copies need),
  /// aligned to at least 64 bytes (cuMemHostAlloc gives whole pages), or
  /// nullptr when the system refuses.
  virtual void *host_allocate(size_t nbytes) = 0;
  /// Returns memory from host_allocate.
  virtual void host_free(void *ptr) = 0;

  /// A new event (never 0).
  virtual EventHandle event_create() = 0;
  /// Marks the point after all work enqueued on `stream` so far.
  virtual void event_record(EventHandle event, StreamHandle stream) = 0;
  /// True when the work before the recorded point has finished.
  virtual bool event_query(EventHandle event) = 0;
  /// Blocks the calling thread until the recorded work has finished.
  virtual void event_synchronize(EventHandle event) = 0;
  /// Destroys an event from event_create.
  virtual void event_destroy(EventHandle event) = 0;
};

} // namespace kiln::runtime::cuda
