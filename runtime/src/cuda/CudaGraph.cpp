// CUDA graphs: capture, instantiate, replay, reset (kiln/runtime/cuda/CudaGraph.h;
// PyTorch's at::cuda::CUDAGraph, aten/src/ATen/cuda/CUDAGraph.cpp).
#include "kiln/runtime/cuda/CudaGraph.h"

#include <stdexcept>
#include <string>

#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CudaError.h"

namespace kiln::runtime::cuda {
namespace {

DeviceBackend &cuda_backend() {
  std::string why;
  DeviceBackend *backend = ensure_cuda_backend(&why);
  if (!backend)
    throw std::runtime_error("CudaGraph: no CUDA backend: " + why);
  return *backend;
}

CachingAllocator &caching_allocator(int device) {
  auto *allocator = dynamic_cast<CachingAllocator *>(&cuda_backend().allocator(device));
  if (!allocator)
    throw std::runtime_error("CudaGraph: cuda:" + std::to_string(device) +
                             "'s allocator is not a CachingAllocator (expected the CUDA backend's)");
  return *allocator;
}

DeviceApi &device_api_of(int device) {
  caching_allocator(device); // registers the backend, checks the index
  DeviceApi *api = device_api(device);
  if (!api)
    throw std::runtime_error("CudaGraph: the registered CUDA backend of cuda:" + std::to_string(device) +
                             " is not a CudaBackend (no DeviceApi)");
  return *api;
}

} // namespace

GraphPoolId graph_pool_handle(int device) { return caching_allocator(device).new_graph_pool(); }

CudaGraph::CudaGraph(int device)
    : api_(&device_api_of(device)), allocator_(&caching_allocator(device)), device_(device) {}

CudaGraph::CudaGraph(DeviceApi &api, CachingAllocator &allocator, int device)
    : api_(&api), allocator_(&allocator), device_(device) {}

CudaGraph::~CudaGraph() {
  try {
    reset();
  } catch (...) {
    // A destructor must not throw; what could not be destroyed stays with the device.
  }
}

std::string CudaGraph::where() const { return "CudaGraph on cuda:" + std::to_string(device_); }

void CudaGraph::check_stream_device(const Stream &stream, const char *op) const {
  const Device expected(DeviceType::CUDA, device_);
  if (stream.device() != expected)
    throw std::invalid_argument("CudaGraph::" + std::string(op) + ": the stream is on " + stream.device().str() +
                                ", expected a stream of " + expected.str() + " (the graph's device)");
}

void CudaGraph::capture_begin(Stream &stream, GraphPoolId pool) {
  check_stream_device(stream, "capture_begin");
  capture_begin(stream_handle(stream), pool);
}

namespace {
/// Per thread (capture mode is thread-local): device -> the stream a
/// CudaGraph is capturing on it.
thread_local StreamHandle t_capturing[64] = {};
void set_capturing(int device, StreamHandle stream) {
  if (device >= 0 && device < 64) t_capturing[device] = stream;
}
} // namespace

std::vector<DeferredIndexCheck> &deferred_index_checks() {
  thread_local std::vector<DeferredIndexCheck> checks;
  return checks;
}

StreamHandle capturing_stream(int device) {
  return device >= 0 && device < 64 ? t_capturing[device] : kDefaultStream;
}

void CudaGraph::capture_begin(StreamHandle stream, GraphPoolId pool) {
  if (state_ != State::Empty)
    throw std::logic_error("CudaGraph::capture_begin: " + where() + " is " +
                           (state_ == State::Capturing ? "capturing already; expected capture_end first"
                                                       : "holding a captured graph; expected reset() first"));
  if (stream == kDefaultStream)
    throw std::invalid_argument("CudaGraph::capture_begin: " + where() +
                                ": the default stream cannot be captured (CUDA's legacy stream); expected a stream "
                                "from DeviceBackend::create_stream");
  const GraphPoolId id = pool ? pool : allocator_->new_graph_pool();
  allocator_->begin_allocate_to_pool(id, stream);
  try {
    api_->stream_begin_capture(stream);
  } catch (...) {
    allocator_->end_allocate_to_pool(stream);
    allocator_->release_pool(id);
    throw;
  }
  pool_ = id;
  holds_pool_ = true;
  stream_ = stream;
  state_ = State::Capturing;
  set_capturing(device_, stream);
}

void CudaGraph::capture_end() {
  if (state_ != State::Capturing)
    throw std::logic_error("CudaGraph::capture_end: " + where() + " is not capturing; expected capture_begin first");
  allocator_->end_allocate_to_pool(stream_);
  set_capturing(device_, kDefaultStream);
  try {
    graph_ = api_->stream_end_capture(stream_);
    exec_ = api_->graph_instantiate(graph_);
  } catch (const CudaError &e) {
    state_ = State::Captured; // so reset() destroys what was made and releases the pool
    reset();
    throw CudaError(e.library(), e.api(), e.code(),
                    "CudaGraph::capture_end: " + where() + ": the capture failed: " + std::string(e.what()));
  } catch (...) {
    state_ = State::Captured;
    reset();
    throw;
  }
  state_ = State::Captured;
}

void CudaGraph::replay() { replay(stream_); }

void CudaGraph::replay(Stream &stream) {
  check_stream_device(stream, "replay");
  replay(stream_handle(stream));
}

void CudaGraph::replay(StreamHandle stream) {
  if (state_ != State::Captured)
    throw std::logic_error("CudaGraph::replay: " + where() + " has no captured graph (" +
                           (state_ == State::Capturing ? std::string("capturing; expected capture_end first")
                                                       : std::string("never captured, or reset; expected "
                                                                     "capture_begin and capture_end first")) +
                           ")");
  api_->graph_launch(exec_, stream);
}

void CudaGraph::reset() {
  if (state_ == State::Capturing) {
    allocator_->end_allocate_to_pool(stream_);
    set_capturing(device_, kDefaultStream);
    try {
      graph_ = api_->stream_end_capture(stream_);
    } catch (const std::exception &) {
      graph_ = 0; // an invalidated capture has no graph
    }
  }
  const GraphExecHandle exec = exec_;
  const GraphHandle graph = graph_;
  exec_ = 0;
  graph_ = 0;
  state_ = State::Empty;
  if (exec)
    api_->graph_exec_destroy(exec);
  if (graph)
    api_->graph_destroy(graph);
  if (holds_pool_) {
    holds_pool_ = false;
    allocator_->release_pool(pool_);
  }
}

} // namespace kiln::runtime::cuda
