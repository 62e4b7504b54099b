// kiln/runtime/cuda/CurrentStream.h - the current stream of each CUDA
// device, per thread (c10::cuda::getCurrentCUDAStream / setCurrentCUDAStream
// and CUDAStreamGuard).
//
// Work a thread enqueues on a device without naming a stream goes to that
// thread's current stream of the device; the caching allocator files an
// allocation made through runtime::Allocator::allocate under it. Each thread
// starts with kDefaultStream on every device.
//
//   {
//     StreamGuard guard(/*device=*/0, side_stream);  // current_stream(0) == side_stream
//     auto buf = Buffer::make(n, cuda_allocator);   // allocated on side_stream
//   }                                               // current_stream(0) restored
#pragma once

#include "kiln/runtime/cuda/DeviceMemory.h"

namespace kiln::runtime::cuda {

/// Device indices the current-stream table holds (0 .. kMaxDevices-1).
/// 64 covers the largest single-node systems (NVIDIA's DGX SuperPOD nodes
/// have 8; PyTorch's C10_COMPILE_TIME_MAX_GPUS is 16 by default).
constexpr int kMaxDevices = 64;

/// This thread's current stream on `device`. Throws std::out_of_range for
/// a device index outside [0, kMaxDevices).
StreamHandle current_stream(int device);

/// Makes `stream` this thread's current stream on `device`; returns the
/// previous one. Throws std::out_of_range like current_stream.
StreamHandle set_current_stream(int device, StreamHandle stream);

/// Sets a device's current stream for a scope and restores the previous one
/// on exit (c10::cuda::CUDAStreamGuard, one device only).
class StreamGuard {
public:
  StreamGuard(int device, StreamHandle stream) : device_(device), previous_(set_current_stream(device, stream)) {}
  ~StreamGuard() { set_current_stream(device_, previous_); }
  StreamGuard(const StreamGuard &) = delete;
  StreamGuard &operator=(const StreamGuard &) = delete;

private:
  int device_;
  StreamHandle previous_;
};

} // namespace kiln::runtime::cuda
