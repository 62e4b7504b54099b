// compile/cuda_graphs.cpp - CompileOptions::cuda_graphs (cuda_graphs.h).
#include "compile/cuda_graphs.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <sstream>

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/LaunchExecutable.h"
#include "kiln/runtime/cuda/CachingAllocator.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CudaGraph.h"
#include "kiln/runtime/cuda/CurrentStream.h"

namespace kiln {
namespace rc = runtime::cuda;

int64_t CompiledModule::CudaGraphs::pool_reserved_bytes() const {
  if (!pool) return 0;
  runtime::DeviceBackend *backend = runtime::find_backend(DeviceType::CUDA);
  if (!backend) return 0;
  auto *caching = dynamic_cast<rc::CachingAllocator *>(&backend->allocator(device));
  return caching ? caching->graph_pool_stats(pool).reserved_bytes : 0;
}

std::string CompiledModule::CudaGraphs::report() const {
  std::ostringstream os;
  os << "cuda graphs: " << captures << " captured, " << replays << " replays, " << fallbacks
     << " fell back; one graph pool for all shapes (" << pool_reserved_bytes() << " bytes reserved)\n";
  for (const auto &e : entries)
    os << "    " << e->label << ": " << e->state << " (" << e->captures << " captures, " << e->replays << " replays)\n";
  for (const std::string &n : notes) os << "    " << n << "\n";
  return os.str();
}

namespace compile_detail {
namespace {

using runtime::TensorView;

bool row_major(const TensorView &v) {
  const std::vector<int64_t> want = runtime::contiguous_strides(v.sizes);
  if (v.strides.size() != v.sizes.size()) return false;
  for (size_t d = 0; d < v.sizes.size(); ++d)
    if (v.sizes[d] > 1 && v.strides[d] != want[d]) return false;
  return true;
}

size_t nbytes(const TensorView &v) { return static_cast<size_t>(v.numel()) * itemsize(v.dtype); }

/// A fresh contiguous tensor of `like`'s sizes and dtype on CUDA device `dev`.
TensorView contiguous_like(const TensorView &like, runtime::DeviceBackend &backend, int dev) {
  TensorView v;
  v.sizes = like.sizes;
  v.dtype = like.dtype;
  v.strides = runtime::contiguous_strides(v.sizes);
  v.buffer = runtime::Buffer::make(std::max<size_t>(nbytes(v), 1), backend.allocator(dev));
  return v;
}

/// Enqueues the copy of `src` into the contiguous `dst` (same device) on
/// `stream`: one device copy when `src` is row-major, else a strided copy.
void copy_into(const TensorView &src, void *dst, runtime::DeviceBackend &backend, const Device &device,
               runtime::Stream &stream) {
  if (nbytes(src) == 0) return;
  if (row_major(src))
    backend.copy_async(dst, device, src.data(), device, nbytes(src), stream);
  else
    backend.copy_to_contiguous(src, dst, stream);
}

class CudaGraphExecutable final : public runtime::Executable {
public:
  CudaGraphExecutable(std::shared_ptr<runtime::Executable> inner, std::shared_ptr<CompiledModule::CudaGraphs> graphs,
                      std::vector<bool> stable, std::string label)
      : inner_(std::move(inner)), graphs_(std::move(graphs)), stable_(std::move(stable)),
        status_(std::make_shared<CudaGraphStatus>()) {
    status_->label = std::move(label);
    graphs_->entries.push_back(status_);
  }
  ~CudaGraphExecutable() override {
    try {
      if (graph_) graph_->reset();
    } catch (...) {
    }
  }

  std::vector<TensorView> run(const std::vector<TensorView> &inputs, std::string *error,
                              const runtime::RunHooks *hooks) const override {
    return runGraph(inputs, false, error, hooks);
  }
  std::vector<TensorView> run_donating(const std::vector<TensorView> &inputs, std::string *error,
                                       const runtime::RunHooks *hooks) const override {
    return runGraph(inputs, true, error, hooks);
  }
  int64_t arena_bytes() const override { return inner_->arena_bytes(); }
  int64_t donating_arena_bytes() const override { return inner_->donating_arena_bytes(); }
  int num_launches() const override { return inner_->num_launches(); }

private:
  enum class Phase { Warmup, Capture, Replay, Fallback };

  std::vector<TensorView> runInner(const std::vector<TensorView> &inputs, bool donating, std::string *error,
                                   const runtime::RunHooks *hooks) const {
    return donating ? inner_->run_donating(inputs, error, hooks) : inner_->run(inputs, error, hooks);
  }

  std::vector<TensorView> runGraph(const std::vector<TensorView> &inputs, bool donating, std::string *error,
                                   const runtime::RunHooks *hooks) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::Warmup || phase_ == Phase::Fallback) {
      auto out = runInner(inputs, donating, error, hooks);
      if (phase_ == Phase::Warmup && (!error || error->empty()) && !out.empty()) {
        phase_ = Phase::Capture;
        status_->state = "warmed up; captures on the next call";
      }
      return out;
    }
    if (!compatible(inputs)) // wrong inputs: the inner executable reports them
      return runInner(inputs, donating, error, hooks);
    // Inside a capture of the caller's (kiln::cuda::Graph): stream launches,
    // which that capture records.
    if (rc::capturing_stream(graphs_->device) != rc::kDefaultStream)
      return runInner(inputs, donating, error, hooks);
    if (phase_ == Phase::Replay && !stableAddressesHold(inputs)) {
      graph_->reset();
      phase_ = Phase::Capture;
    }
    runtime::DeviceBackend &backend = *runtime::find_backend(DeviceType::CUDA);
    const int dev = graphs_->device;
    const rc::StreamHandle run_handle = rc::current_stream(dev);
    std::unique_ptr<runtime::Stream> borrowed;
    if (run_handle != rc::kDefaultStream) borrowed = rc::borrowed_stream(dev, run_handle);
    runtime::Stream &run_stream = borrowed ? *borrowed : backend.default_stream(dev);
    if (phase_ == Phase::Capture) {
      std::string reason = capture(inputs, backend, run_stream);
      if (!reason.empty()) {
        phase_ = Phase::Fallback;
        ++graphs_->fallbacks;
        status_->state = "fell back to stream launches: " + reason;
        return runInner(inputs, donating, error, hooks);
      }
      phase_ = Phase::Replay;
      ++graphs_->captures;
      ++status_->captures;
      status_->state = "captured";
    }
    // Inputs into the static inputs (skipped when they are the same memory).
    const Device device{DeviceType::CUDA, dev};
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (stableNow_[i]) continue;
      const TensorView &in = inputs[i];
      if (in.data() == static_inputs_[i].data() && row_major(in)) continue;
      copy_into(in, static_inputs_[i].data(), backend, device, run_stream);
    }
    graph_->replay(rc::stream_handle(run_stream));
    ++graphs_->replays;
    ++status_->replays;
    // Outputs copied out: the next replay writes the static outputs again.
    std::vector<TensorView> results;
    results.reserve(static_outputs_.size());
    for (const TensorView &s : static_outputs_) {
      TensorView r = contiguous_like(s, backend, dev);
      copy_into(s, r.data(), backend, device, run_stream);
      results.push_back(std::move(r));
    }
    run_stream.synchronize(); // as a stream-launched run: results ready on return
    // Index checks (gathers, scatter_add) read after the replay: the first bad
    // one is the run's error, as with stream launches.
    for (const rc::DeferredIndexCheck &check : checks_) {
      int64_t status[2] = {0, 0};
      if (backend.host_accessible())
        std::memcpy(status, check.status, sizeof(status));
      else
        backend.copy(status, kCPU, check.status, device, sizeof(status));
      if (status[0] != 0) {
        if (error) *error = check.message(status[1]);
        return {};
      }
    }
    if (hooks && hooks->on_output_ready)
      for (size_t i = 0; i < results.size(); ++i) hooks->on_output_ready(static_cast<int>(i), results[i]);
    return results;
  }

  bool compatible(const std::vector<TensorView> &inputs) const {
    if (inputs.size() != stable_.size()) return false;
    for (const TensorView &in : inputs)
      if (!in.buffer || in.buffer->device() != Device{DeviceType::CUDA, graphs_->device}) return false;
    if (static_inputs_.empty()) return true;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].sizes != static_inputs_[i].sizes || inputs[i].dtype != static_inputs_[i].dtype) return false;
    return true;
  }

  /// The stable inputs the graph reads in place are still those tensors; a
  /// changed one becomes a private (copied) input for the next capture.
  bool stableAddressesHold(const std::vector<TensorView> &inputs) const {
    bool hold = true;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (stableNow_[i] && (inputs[i].data() != static_inputs_[i].data() || inputs[i].strides != static_inputs_[i].strides)) {
        stable_[i] = false;
        hold = false;
      }
    return hold;
  }

  /// Captures one run; "" on success, else why not.
  std::string capture(const std::vector<TensorView> &inputs, runtime::DeviceBackend &backend,
                      runtime::Stream &run_stream) const {
    const int dev = graphs_->device;
    try {
      if (!graphs_->capture_stream) graphs_->capture_stream = backend.create_stream(dev);
      if (!graphs_->pool) graphs_->pool = rc::graph_pool_handle(dev);
      if (!graph_) graph_ = std::make_unique<rc::CudaGraph>(dev);
      // Static inputs: the stable tensors themselves, private buffers for the rest.
      static_inputs_.clear();
      stableNow_.assign(inputs.size(), false);
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (stable_[i]) {
          static_inputs_.push_back(inputs[i]);
          stableNow_[i] = true;
          continue;
        }
        static_inputs_.push_back(contiguous_like(inputs[i], backend, dev));
      }
      // The capture stream starts after the work queued on the run stream.
      rc::DeviceApi *api = rc::device_api(dev);
      const rc::EventHandle ready = api->event_create();
      api->event_record(ready, rc::stream_handle(run_stream));
      api->stream_wait_event(rc::stream_handle(*graphs_->capture_stream), ready);
      api->event_destroy(ready);
      std::string error;
      std::vector<TensorView> outputs;
      {
        rc::StreamGuard current(dev, rc::stream_handle(*graphs_->capture_stream));
        rc::deferred_index_checks().clear();
        graph_->capture_begin(*graphs_->capture_stream, graphs_->pool);
        try {
          // Tests: a host synchronize inside the captured work (what an op
          // that cannot be captured does), to exercise the fallback.
          if (std::getenv("KILN_CUDA_GRAPHS_TEST_SYNC_IN_CAPTURE"))
            api->stream_synchronize(rc::stream_handle(*graphs_->capture_stream));
          outputs = inner_->run(static_inputs_, &error);
        } catch (...) {
          graph_->reset();
          throw;
        }
        if (!error.empty()) {
          graph_->reset();
          static_inputs_.clear();
          return error;
        }
        graph_->capture_end();
        checks_ = std::move(rc::deferred_index_checks());
        rc::deferred_index_checks().clear();
      }
      static_outputs_ = std::move(outputs);
      return "";
    } catch (const std::exception &e) {
      if (graph_) {
        try {
          graph_->reset();
        } catch (...) {
        }
      }
      static_inputs_.clear();
      static_outputs_.clear();
      return e.what();
    }
  }

  std::shared_ptr<runtime::Executable> inner_;
  std::shared_ptr<CompiledModule::CudaGraphs> graphs_;
  mutable std::vector<bool> stable_;    ///< may read the caller's tensor in place
  mutable std::vector<bool> stableNow_; ///< does, in the current graph
  std::shared_ptr<CudaGraphStatus> status_;
  mutable std::mutex mu_;
  mutable Phase phase_ = Phase::Warmup;
  mutable std::unique_ptr<rc::CudaGraph> graph_;
  mutable std::vector<TensorView> static_inputs_, static_outputs_;
  mutable std::vector<rc::DeferredIndexCheck> checks_; ///< status words to read after each replay
};

} // namespace

std::shared_ptr<runtime::Executable> with_cuda_graphs(std::shared_ptr<runtime::Executable> inner,
                                                      std::shared_ptr<CompiledModule::CudaGraphs> graphs,
                                                      std::vector<bool> stable, std::string label) {
  return std::make_shared<CudaGraphExecutable>(std::move(inner), std::move(graphs), std::move(stable),
                                               std::move(label));
}

} // namespace compile_detail
} // namespace kiln
