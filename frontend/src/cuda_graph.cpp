// kiln::cuda::Graph: eager CUDA ops captured into a runtime CudaGraph
// (kiln/cuda_graph.h over kiln/runtime/cuda/CudaGraph.h).
#include "kiln/cuda_graph.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "cuda_backend_of.h"
#include "kiln/error.h"
#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CudaGraph.h"
#include "kiln/runtime/cuda/CurrentStream.h"

namespace kiln::cuda {
namespace rc = runtime::cuda;

namespace {

using detail::backend_of;

/// The capture stream of `device`, made on first use and kept for the
/// process (torch.cuda.graph's default capture stream).
runtime::Stream &capture_stream(runtime::DeviceBackend &backend, int device) {
  static std::mutex mu;
  static auto *streams = new std::map<int, std::unique_ptr<runtime::Stream>>;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<runtime::Stream> &s = (*streams)[device];
  if (!s)
    s = backend.create_stream(device);
  return *s;
}

/// Runs `body`, rethrowing runtime errors as kiln::Error prefixed with the op.
template <class F> void as_kiln_error(const char *op, F &&body) {
  try {
    body();
  } catch (const Error &) {
    throw;
  } catch (const std::exception &e) {
    throw Error(std::string("kiln::cuda::Graph::") + op + ": " + e.what());
  }
}

} // namespace

uint64_t graph_pool_handle(int device) {
  backend_of(device, "graph_pool_handle");
  uint64_t id = 0;
  as_kiln_error("graph_pool_handle", [&] { id = rc::graph_pool_handle(device); });
  return id;
}

struct Graph::Impl {
  int device;
  runtime::DeviceBackend &backend;
  rc::CudaGraph graph;
  std::optional<rc::StreamGuard> current; ///< the capture stream current during a capture
  Impl(int d, runtime::DeviceBackend &b) : device(d), backend(b), graph(d) {}
};

Graph::Graph(int device) {
  runtime::DeviceBackend &backend = backend_of(device, "Graph");
  as_kiln_error("Graph", [&] { impl_ = std::make_unique<Impl>(device, backend); });
}

Graph::~Graph() = default;

void Graph::capture_begin(uint64_t pool) {
  Impl &g = *impl_;
  runtime::Stream &stream = capture_stream(g.backend, g.device);
  as_kiln_error("capture_begin", [&] {
    // The capture stream starts after the work already queued on the current one.
    rc::DeviceApi *api = rc::device_api(g.device);
    const rc::EventHandle ready = api->event_create();
    api->event_record(ready, rc::current_stream(g.device));
    api->stream_wait_event(rc::stream_handle(stream), ready);
    api->event_destroy(ready);
    g.graph.capture_begin(stream, pool);
  });
  g.current.emplace(g.device, rc::stream_handle(stream));
}

void Graph::capture_end() {
  Impl &g = *impl_;
  g.current.reset();
  as_kiln_error("capture_end", [&] { g.graph.capture_end(); });
}

void Graph::replay() {
  Impl &g = *impl_;
  as_kiln_error("replay", [&] { g.graph.replay(rc::current_stream(g.device)); });
}

void Graph::reset() {
  Impl &g = *impl_;
  g.current.reset();
  as_kiln_error("reset", [&] { g.graph.reset(); });
}

uint64_t Graph::pool() const { return impl_->graph.pool(); }
bool Graph::is_captured() const { return impl_->graph.is_captured(); }

} // namespace kiln::cuda
