// CUDA tensors of Gloo collectives staged through pinned host memory
// (HostStaging.h).
#include "HostStaging.h"

#include <set>

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CurrentStream.h"
#include "kiln/runtime/distributed/Store.h"

namespace kiln::runtime::distributed {

using Kind = DistributedError::Kind;

StagingStreams::~StagingStreams() {
  for (auto &[device, entry] : streams_) entry.first->stream_destroy(entry.second);
}

cuda::StreamHandle StagingStreams::get(cuda::DeviceApi &api, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(device);
  if (it == streams_.end()) it = streams_.emplace(device, std::make_pair(&api, api.stream_create())).first;
  return it->second.second;
}

HostStaging::~HostStaging() {
  // A collective that failed before wait_for_inputs() may leave a copy in
  // flight into a block about to be reused.
  try {
    synchronize_streams();
  } catch (...) {
  }
  for (Block &b : blocks_) pinned_->deallocate(b.host, b.bytes);
}

void *HostStaging::add(const TensorView &v, bool read, bool written) {
  const Device device = v.buffer->device();
  if (device.type == DeviceType::CPU) return v.data();
  if (device.type != DeviceType::CUDA) {
    if (DeviceBackend *backend = find_backend(device.type); backend && backend->host_accessible()) return v.data();
    throw DistributedError(Kind::Invalid, "gloo: a tensor on " + device.str() +
                                              " (expected cpu or cuda: Gloo reaches other devices' memory only when "
                                              "the host can read it)");
  }
  cuda::DeviceApi *api = cuda::device_api(device.index);
  if (!api) throw DistributedError(Kind::Invalid, "gloo: " + device.str() + " is not a device of the CUDA backend");
  if (!pinned_) pinned_ = cuda::pinned_allocator();
  Block b;
  b.view = v;
  b.bytes = static_cast<size_t>(v.numel()) * itemsize(v.dtype);
  b.written = written;
  b.api = api;
  b.stream = streams_.get(*api, device.index);
  b.host = pinned_->allocate(b.bytes);
  blocks_.push_back(b);
  // The copy reads what the caller's stream has queued before the call.
  const cuda::EventHandle queued = api->event_create();
  api->event_record(queued, cuda::current_stream(device.index));
  api->stream_wait_event(b.stream, queued);
  api->event_destroy(queued); // released by the driver once the wait is satisfied
  if (read && b.bytes > 0) api->memcpy_async(b.host, v.data(), b.bytes, cuda::CopyKind::DeviceToHost, b.stream);
  return b.host;
}

void HostStaging::synchronize_streams() {
  std::set<std::pair<cuda::DeviceApi *, cuda::StreamHandle>> done;
  for (const Block &b : blocks_)
    if (done.insert({b.api, b.stream}).second) b.api->stream_synchronize(b.stream);
}

void HostStaging::wait_for_inputs() { synchronize_streams(); }

void HostStaging::copy_back() {
  for (const Block &b : blocks_)
    if (b.written && b.bytes > 0)
      b.api->memcpy_async(b.view.data(), b.host, b.bytes, cuda::CopyKind::HostToDevice, b.stream);
  synchronize_streams();
}

} // namespace kiln::runtime::distributed
