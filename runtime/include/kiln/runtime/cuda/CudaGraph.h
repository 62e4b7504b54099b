// kiln/runtime/cuda/CudaGraph.h - a CUDA graph: the work one stream does,
// captured once and replayed (torch.cuda.CUDAGraph, in CUDA's terms).
//
//   auto side = backend.create_stream(0);             // not the default stream
//   cuda::StreamGuard current(0, cuda::stream_handle(*side));
//   cuda::CudaGraph graph;                            // cuda:0 of the CUDA backend
//   graph.capture_begin(*side);                       // a new private pool
//   api.memcpy_async(static_in, host_in, n, CopyKind::HostToDevice, s);
//   api.launch_kernel(fn, grid, block, 0, s, args);  // recorded, not run
//   graph.capture_end();                              // instantiated
//   for (...) { fill(host_in); graph.replay(); }      // the same launches, new data
//   graph.reset();                                    // the pool's memory goes back
//
// What may run during a capture (between capture_begin and capture_end, on
// the capturing stream): kernel launches, memcpy_async and memset_async.
// The host side of a captured copy must be pinned memory (host_allocate,
// CachingHostAllocator, pin_memory()): a pageable copy is synchronous and
// cannot be captured. They are recorded with their arguments (pointers and
// sizes as values), so
// each replay reads and writes the same addresses: inputs must be copied
// into the buffers the capture used (static inputs), outputs read from the
// buffers it wrote. Memory allocated on the capturing stream during the
// capture (e.g. by eager ops while it is the current stream, StreamGuard)
// comes from the graph's private pool of the caching allocator and stays
// reserved for the replays, even when its buffers are freed: a freed block
// goes back to the pool, where a later capture into the same pool may take
// it (so graphs sharing a pool must be replayed in the order they were
// captured, on one stream, as in PyTorch). Errors during a capture are
// CUDA's: synchronizing the capturing stream (or anything that does, e.g.
// copying a result to the host, a CPU fallback of the simulator), or
// launching a graph into it, throws CudaError with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture;
// capture_end then throws CudaError (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
// naming that first failure, and the graph is empty again (reset). Capture
// mode: thread-local (other threads are unrestricted; the capture is ended
// on the thread that began it).
//
// Memory: reset() (and the destructor) releases the graph's hold on its
// pool; the pool's free segments go back to the device when no graph holds
// it, the others when their blocks are freed. Allocator statistics:
// CachingAllocator::graph_pool_stats(pool()) and
// CudaMemoryStats::graph_pool_reserved_bytes / graph_pool_allocated_bytes.
//
// A compiled executable (issue 16 item 3: a static-shape forward or
// backward captured once, replayed after) uses it like this:
//   - once per compiled function: pool = graph_pool_handle(device) (one pool
//     for all its shapes), a capture stream from DeviceBackend::create_stream;
//   - first run of a shape: run the launch list once normally (kernels
//     loaded, cuBLASLt heuristics cached), then allocate the static input
//     buffers, StreamGuard(device, capture stream) so Allocator::allocate
//     lands in the pool, graph.capture_begin(capture_stream, pool), run the
//     launch list on the capture stream reading the static inputs (arena
//     and outputs allocated inside the capture), graph.capture_end(); a
//     CudaError from any of these is the fallback reason (stream launches,
//     kiln::explain: e.what());
//   - each run: copy the caller's inputs into the static inputs
//     (memcpy_async device to device on the run stream, outside the graph:
//     the caller's addresses change), graph.replay(run_stream), hand out
//     the static outputs (the next replay overwrites them: copy or keep
//     one live run per graph);
//   - a new shape: a new CudaGraph with the same pool; graph.reset() when
//     the artifact is dropped.
//
// Thread-compatible (one thread at a time per graph), as torch's CUDAGraph.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/runtime/Stream.h"
#include "kiln/runtime/cuda/CachingAllocator.h"
#include "kiln/runtime/cuda/DeviceApi.h"

namespace kiln::runtime::cuda {

/// A new private pool id of CUDA device `device`'s caching allocator
/// (torch.cuda.graph_pool_handle()): pass it to several graphs'
/// capture_begin so they share one pool. Throws std::runtime_error when
/// there is no CUDA backend.
GraphPoolId graph_pool_handle(int device = 0);

/// The stream a CudaGraph of this thread is capturing on `device`
/// (kDefaultStream when none): LaunchExecutable::run skips its closing
/// synchronize on it (a capturing stream cannot be synchronized).
StreamHandle capturing_stream(int device);

/// An index check (IndexCheck.h) a LaunchExecutable run met while this
/// thread captured: its status word (kIndexStatusElements int64s, written
/// by the kernel at each replay, copied aside by the graph) is read after
/// the replay instead
/// (`message(bad index)` is the run's error when status[0] != 0).
struct DeferredIndexCheck {
  const void *status = nullptr;   ///< a copy of the status word, made by a captured copy right after its launch
  std::shared_ptr<void> keep;     ///< the buffer holding that copy (the plan reuses the status slot's memory)
  std::function<std::string(int64_t)> message;
};
/// This thread's deferred index checks (the capturer clears and takes them).
std::vector<DeferredIndexCheck> &deferred_index_checks();

class CudaGraph {
public:
  /// A graph on CUDA device `device` of the registered CUDA backend (its
  /// DeviceApi and caching allocator). Throws std::runtime_error when there
  /// is no CUDA backend, std::out_of_range for a device it does not have.
  explicit CudaGraph(int device = 0);
  /// A graph over an explicit device and allocator (both must outlive it).
  CudaGraph(DeviceApi &api, CachingAllocator &allocator, int device);
  /// reset(), swallowing errors.
  ~CudaGraph();
  CudaGraph(const CudaGraph &) = delete;
  CudaGraph &operator=(const CudaGraph &) = delete;

  /// Starts capturing `stream` (a CUDA stream of this graph's device, not
  /// the default stream) into private pool `pool` (0: a new pool). Throws
  /// std::invalid_argument for a stream of another device and
  /// std::logic_error when the graph is capturing or holds a capture
  /// (reset() first); CudaError from the device (e.g. the default stream).
  void capture_begin(Stream &stream, GraphPoolId pool = 0);
  /// The same on a raw stream handle of this graph's device.
  void capture_begin(StreamHandle stream, GraphPoolId pool = 0);
  /// Ends the capture and instantiates the graph (cuStreamEndCapture,
  /// cuGraphInstantiateWithFlags). Throws std::logic_error when not
  /// capturing; CudaError when the capture was invalidated (the reason is
  /// in the message; the graph is reset).
  void capture_end();
  /// Runs the captured work once on the capture stream (cuGraphLaunch).
  /// Throws std::logic_error when there is no captured graph (never
  /// captured, or reset).
  void replay();
  /// Runs it on `stream` (a stream of this graph's device).
  void replay(Stream &stream);
  void replay(StreamHandle stream);
  /// Destroys the graph (cuGraphExecDestroy, cuGraphDestroy) and releases
  /// its hold on the pool; a capture in progress is ended and dropped. The
  /// graph may capture again afterwards. pool() keeps its id.
  void reset();

  /// The private pool the graph captured into (0 before the first capture).
  GraphPoolId pool() const { return pool_; }
  bool is_capturing() const { return state_ == State::Capturing; }
  /// True between a successful capture_end and reset.
  bool is_captured() const { return state_ == State::Captured; }
  int device() const { return device_; }
  /// The stream the graph was captured on (kDefaultStream before any).
  StreamHandle capture_stream() const { return stream_; }

private:
  enum class State { Empty, Capturing, Captured };

  void check_stream_device(const Stream &stream, const char *op) const;
  std::string where() const; // "CudaGraph on cuda:N"

  DeviceApi *api_;
  CachingAllocator *allocator_;
  int device_;
  State state_ = State::Empty;
  StreamHandle stream_ = kDefaultStream;
  GraphPoolId pool_ = 0;
  bool holds_pool_ = false; ///< a use of pool_ taken by capture_begin, not yet released
  GraphHandle graph_ = 0;
  GraphExecHandle exec_ = 0;
};

} // namespace kiln::runtime::cuda
