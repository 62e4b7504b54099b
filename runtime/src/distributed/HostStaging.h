// Host memory for the tensors of one Gloo collective (GlooProcessGroup.cpp),
// after c10d ProcessGroupGloo's CUDA work classes (AsyncAllreduceCUDAWork,
// AsyncBroadcastCUDAWork, ...): a CPU tensor is used in place; a CUDA tensor
// gets a pinned block of the CUDA backend's CachingHostAllocator.
//
//   HostStaging staging(streams);                  // at the call, caller's thread
//   void *host = staging.add(t, /*read=*/true, /*written=*/true);
//   ... on the communication thread:
//   staging.wait_for_inputs();                     // the device->host copies are done
//   gloo::allreduce(... host ...);
//   staging.copy_back();                           // host->device, waited for
//
// add() orders the device->host copy after the work the calling thread's
// current stream of the device has queued (the staging stream waits for an
// event recorded there), so a gradient written by a kernel just before the
// call is what is copied. copy_back() synchronizes the staging streams, so
// once the Work completes the tensors hold the results for any stream.
#pragma once

#include <map>
#include <mutex>
#include <vector>

#include "kiln/runtime/TensorView.h"
#include "kiln/runtime/cuda/CachingHostAllocator.h"
#include "kiln/runtime/cuda/DeviceApi.h"

namespace kiln::runtime::distributed {

/// One staging stream per CUDA device, made on first use and destroyed
/// with the group (c10d keeps one per device per group too). Thread-safe.
class StagingStreams {
public:
  StagingStreams() = default;
  ~StagingStreams();
  StagingStreams(const StagingStreams &) = delete;
  StagingStreams &operator=(const StagingStreams &) = delete;
  /// The staging stream of CUDA device `device` of the registered backend.
  cuda::StreamHandle get(cuda::DeviceApi &api, int device);

private:
  std::mutex mu_;
  std::map<int, std::pair<cuda::DeviceApi *, cuda::StreamHandle>> streams_;
};

class HostStaging {
public:
  explicit HostStaging(StagingStreams &streams) : streams_(streams) {}
  /// Returns the pinned blocks to the allocator.
  ~HostStaging();
  HostStaging(const HostStaging &) = delete;
  HostStaging &operator=(const HostStaging &) = delete;

  /// The host address of dense view `v`'s elements for the collective:
  /// v.data() for a CPU tensor; for a CUDA tensor a pinned block, filled
  /// from the device (asynchronously, now) when the collective `read`s it,
  /// and copied back by copy_back() when it is `written`. Throws
  /// DistributedError Invalid for a device kind Gloo cannot reach.
  void *add(const TensorView &v, bool read, bool written);
  /// Blocks until the device->host copies are done (communication thread).
  void wait_for_inputs();
  /// Copies the written blocks back to their devices and waits for them.
  void copy_back();
  /// True when some tensor is a CUDA tensor (the staging path was taken).
  bool staged() const { return !blocks_.empty(); }

private:
  struct Block {
    TensorView view;
    void *host = nullptr;
    size_t bytes = 0;
    bool written = false;
    cuda::DeviceApi *api = nullptr;
    cuda::StreamHandle stream = cuda::kDefaultStream;
  };
  void synchronize_streams();

  StagingStreams &streams_;
  cuda::CachingHostAllocator *pinned_ = nullptr;
  std::vector<Block> blocks_;
};

} // namespace kiln::runtime::distributed
