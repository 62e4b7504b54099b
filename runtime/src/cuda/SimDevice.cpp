// The CUDA-on-CPU simulator as a DeviceApi (kiln/runtime/cuda/CudaBackend.h,
// make_simulator_device): memory is host memory between guard pages
// (sim/SimMemory.h), kernels are the same CUDA C host-compiled and run as a
// grid (sim/HostModule.h, sim/Grid.h), streams run their work inline (so a
// recorded event has always completed), GEMM and convolution fall back to
// the CPU's (CudaBackend, host_accessible). Everything above this class
// (the caching allocators, streams, events, the emitter's kernels) is the
// code a GPU runs.
//
// Stream capture (CUDA graphs): a capturing stream records its launches
// (kernel, extents and a copy of each argument value, sized by the kernel's
// parameter sizes), copies and memsets instead of running them; a graph
// launch runs the records in capture order, reading the buffers' contents
// at that time, as cuGraphLaunch does. The capture errors are CUDA's
// (CudaError with the CUresult), named like the driver's.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CudaError.h"
#include "kiln/runtime/sim/Grid.h"
#include "kiln/runtime/sim/HostModule.h"
#include "kiln/runtime/sim/SimMemory.h"

namespace kiln::runtime::cuda {
namespace {

/// The simulated device's memory unless $KILN_SIM_MEMORY_MB says otherwise:
/// 8 GiB, enough for the test models, small enough that a runaway
/// allocation fails with the caching allocator's OOM message, not the
/// host's OOM killer.
constexpr size_t kDefaultSimMemoryBytes = size_t{8} << 30;
/// An H200's streaming multiprocessors (launch heuristics read it).
constexpr int kH200Multiprocessors = 132;
/// Shared memory per block with the opt-in on sm_90 (227 KiB).
constexpr size_t kSm90MaxSharedBytes = 227 * 1024;

size_t sim_memory_bytes() {
  const char *mb = std::getenv("KILN_SIM_MEMORY_MB");
  if (mb && *mb) {
    char *end = nullptr;
    const unsigned long long v = std::strtoull(mb, &end, 10);
    if (end && *end == '\0' && v > 0)
      return static_cast<size_t>(v) << 20;
  }
  return kDefaultSimMemoryBytes;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// cuda.h CUresult codes of the capture errors (CudaTypes.h has them for the driver).
constexpr int kErrorInvalidHandle = 400;              // CUDA_ERROR_INVALID_HANDLE
constexpr int kErrorIllegalState = 401;               // CUDA_ERROR_ILLEGAL_STATE
constexpr int kErrorCaptureUnsupported = 900;         // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
constexpr int kErrorCaptureInvalidated = 901;         // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
constexpr int kErrorCaptureWrongThread = 908;         // CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
constexpr const char *kSimLibrary = "cuda simulator"; // CudaError::library()

std::string error_name(int code) {
  switch (code) {
  case kErrorInvalidHandle: return "CUDA_ERROR_INVALID_HANDLE";
  case kErrorIllegalState: return "CUDA_ERROR_ILLEGAL_STATE";
  case kErrorCaptureUnsupported: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
  case kErrorCaptureInvalidated: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
  case kErrorCaptureWrongThread: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
  default: return "CUresult " + std::to_string(code);
  }
}

[[noreturn]] void throw_capture_error(const char *api, int code, const std::string &what) {
  throw CudaError(kSimLibrary, api, code, std::string(api) + " failed: " + error_name(code) + ": " + what);
}

/// A handle no simulated device has made yet: unique in the process, as
/// CUstream and CUevent pointers are, so one device can tell another's.
uintptr_t new_handle() {
  static std::atomic<uintptr_t> last{0};
  return ++last;
}

/// One recorded operation of a captured graph.
struct GraphNode {
  enum class Kind { Kernel, Copy, Set, Host } kind = Kind::Kernel;
  std::function<void()> host; ///< Host: the function (cuLaunchHostFunc)
  // Kernel: the function (its module kept loaded), extents, argument values.
  sim::HostKernel kernel;
  std::shared_ptr<const void> module;
  Dim3 grid, block;
  size_t shared_bytes = 0;
  std::vector<std::vector<std::max_align_t>> args; ///< each parameter's value, copied at capture
  // Copy and Set.
  void *dst = nullptr;
  const void *src = nullptr;
  uint8_t value = 0;
  size_t nbytes = 0;
};
using GraphNodes = std::vector<GraphNode>;

/// A capture in progress on one stream.
struct Capture {
  std::thread::id thread;   ///< the thread that began it (thread-local mode)
  GraphNodes nodes;
  std::string invalidated;  ///< the first failure, empty while valid
};

class SimDevice final : public DeviceApi {
public:
  explicit SimDevice(int index) : index_(index), capacity_(sim_memory_bytes()) {}

  DeviceProperties properties() const override {
    DeviceProperties p;
    p.name = "CUDA simulator " + std::to_string(index_) + " (sm_90 on the CPU)";
    p.major = 9;
    p.minor = 0;
    p.total_memory_bytes = capacity_;
    p.multiprocessors = kH200Multiprocessors;
    p.max_shared_bytes_per_block = kSm90MaxSharedBytes;
    p.host_accessible = true;
    return p;
  }

  // ---- memory: guard-paged host memory, bounded like a device's --------------
  void *raw_allocate(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (nbytes > capacity_ - used_)
      return nullptr;  // the device is full: the caching allocator frees its cache and retries
    void *p = sim::allocate(nbytes, "cuda:" + std::to_string(index_) + " segment");
    used_ += nbytes;
    sizes_[p] = nbytes;
    return p;
  }
  void raw_free(void *ptr) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sizes_.find(ptr);
    if (it == sizes_.end())
      throw std::invalid_argument("cuda simulator: raw_free of a pointer it did not allocate");
    used_ -= it->second;
    sizes_.erase(it);
    sim::deallocate(ptr);
  }
  DeviceMemoryInfo mem_get_info() override {
    std::lock_guard<std::mutex> lock(mu_);
    return {capacity_ - used_, capacity_};
  }
  /// "Pinned" memory: plain host memory, remembered so a captured copy can
  /// tell it from pageable memory (which CUDA cannot capture).
  void *host_allocate(size_t nbytes) override {
    void *p = std::aligned_alloc(64, (nbytes + 63) / 64 * 64);
    std::lock_guard<std::mutex> lock(mu_);
    if (p)
      pinned_[reinterpret_cast<uintptr_t>(p)] = nbytes;
    return p;
  }
  void host_free(void *ptr) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    std::free(ptr);
  }

  // ---- events and streams: work runs inline, so every event has completed ----
  EventHandle event_create() override { return timed_event_create(); }
  EventHandle timed_event_create() override {
    std::lock_guard<std::mutex> lock(mu_);
    last_handle_ = new_handle();
    event_times_[last_handle_] = 0;
    return last_handle_;
  }
  void event_record(EventHandle event, StreamHandle) override {
    std::lock_guard<std::mutex> lock(mu_);
    event_times_.at(event) = now_seconds();
  }
  bool event_query(EventHandle) override { return true; }
  void event_synchronize(EventHandle) override {}
  void event_destroy(EventHandle event) override {
    std::lock_guard<std::mutex> lock(mu_);
    event_times_.erase(event);
  }
  double event_elapsed_seconds(EventHandle start, EventHandle end) override {
    std::lock_guard<std::mutex> lock(mu_);
    return event_times_.at(end) - event_times_.at(start);
  }
  StreamHandle stream_create() override {
    std::lock_guard<std::mutex> lock(mu_);
    last_handle_ = new_handle();
    streams_.insert(last_handle_);
    return last_handle_;
  }
  void stream_destroy(StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(stream);
    captures_.erase(stream);
  }
  /// Work ran inline already; a capturing stream cannot be synchronized
  /// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), which invalidates its capture.
  void stream_synchronize(StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (Capture *c = capture_of(stream))
      fail_capture(*c, "cuStreamSynchronize", stream, kErrorCaptureUnsupported,
                   "a stream cannot be synchronized while it is capturing (CudaGraph: synchronize before "
                   "capture_begin or after capture_end)");
  }
  void stream_wait_event(StreamHandle, EventHandle) override {}

  // ---- copies and kernels ----------------------------------------------------
  void memcpy_async(void *dst, const void *src, size_t nbytes, CopyKind kind, StreamHandle stream) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Capture *c = recording(stream, "cuMemcpyAsync")) {
        // A copy from or to pageable host memory is synchronous, which a
        // capture cannot record (PyTorch's "operation not permitted when
        // stream is capturing" for a CPU tensor copied in a capture).
        const void *host = kind == CopyKind::HostToDevice ? src : kind == CopyKind::DeviceToHost ? dst : nullptr;
        if (host && !is_pinned(host, nbytes))
          fail_capture(*c, "cuMemcpyAsync", stream, kErrorCaptureUnsupported,
                       "a copy " + std::string(kind == CopyKind::HostToDevice ? "from" : "to") +
                           " pageable host memory (" + std::to_string(nbytes) +
                           " bytes) cannot be captured; expected pinned memory (host_allocate, "
                           "CachingHostAllocator) or a device buffer");
        GraphNode node;
        node.kind = GraphNode::Kind::Copy;
        node.dst = dst;
        node.src = src;
        node.nbytes = nbytes;
        c->nodes.push_back(std::move(node));
        return;
      }
    }
    std::memmove(dst, src, nbytes);
  }
  void memset_async(void *dst, uint8_t value, size_t nbytes, StreamHandle stream) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Capture *c = recording(stream, "cuMemsetD8Async")) {
        GraphNode node;
        node.kind = GraphNode::Kind::Set;
        node.dst = dst;
        node.value = value;
        node.nbytes = nbytes;
        c->nodes.push_back(std::move(node));
        return;
      }
    }
    std::memset(dst, value, nbytes);
  }
  std::vector<KernelFunction> load_kernels(const std::string &source,
                                           const std::vector<std::string> &kernel_names) override {
    std::shared_ptr<const sim::HostModule> module = sim::load_module(source);
    std::vector<KernelFunction> out;
    for (const std::string &name : kernel_names) {
      auto kernel = std::make_shared<const sim::HostKernel>(module->kernel(name));
      out.push_back(KernelFunction{name, kernel.get(), kernel});
    }
    return out;
  }
  void launch_kernel(const KernelFunction &fn, Dim3 grid, Dim3 block, size_t shared_bytes, StreamHandle stream,
                     void **args) override {
    const auto &kernel = *static_cast<const sim::HostKernel *>(fn.handle);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Capture *c = recording(stream, "cuLaunchKernel")) {
        c->nodes.push_back(kernel_node(*c, stream, fn, kernel, grid, block, shared_bytes, args));
        return;
      }
    }
    run_kernel(kernel, grid, block, shared_bytes, args);
  }

  /// Streams run inline: now, or a host node of the capture.
  void launch_host_func(StreamHandle stream, std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (Capture *c = recording(stream, "cuLaunchHostFunc")) {
        GraphNode node;
        node.kind = GraphNode::Kind::Host;
        node.host = std::move(fn);
        c->nodes.push_back(std::move(node));
        return;
      }
    }
    fn();
  }

  // ---- CUDA graphs -----------------------------------------------------------
  void stream_begin_capture(StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (stream == kDefaultStream)
      throw_capture_error("cuStreamBeginCapture", kErrorCaptureUnsupported,
                          "cuda:" + std::to_string(index_) +
                              "'s legacy default stream (0) cannot be captured; expected a stream from "
                              "stream_create (DeviceBackend::create_stream)");
    if (!streams_.count(stream))
      throw_capture_error("cuStreamBeginCapture", kErrorInvalidHandle,
                          "stream " + std::to_string(stream) + " is not a stream of cuda:" + std::to_string(index_) +
                              " (expected one of its stream_create handles)");
    if (captures_.count(stream))
      throw_capture_error("cuStreamBeginCapture", kErrorIllegalState,
                          "stream " + std::to_string(stream) + " of cuda:" + std::to_string(index_) +
                              " is capturing already; expected cuStreamEndCapture first");
    captures_[stream].thread = std::this_thread::get_id();
  }
  GraphHandle stream_end_capture(StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = captures_.find(stream);
    if (it == captures_.end())
      throw_capture_error("cuStreamEndCapture", kErrorIllegalState,
                          "stream " + std::to_string(stream) + " of cuda:" + std::to_string(index_) +
                              " is not capturing; expected cuStreamBeginCapture first");
    if (it->second.thread != std::this_thread::get_id())
      throw_capture_error("cuStreamEndCapture", kErrorCaptureWrongThread,
                          "the capture of stream " + std::to_string(stream) +
                              " was begun on another thread (thread-local capture mode); end it there");
    Capture capture = std::move(it->second);
    captures_.erase(it);
    if (!capture.invalidated.empty())
      throw_capture_error("cuStreamEndCapture", kErrorCaptureInvalidated,
                          "the capture of stream " + std::to_string(stream) + " of cuda:" + std::to_string(index_) +
                              " was invalidated by " + capture.invalidated + "; no graph was made");
    last_handle_ = new_handle();
    graphs_[last_handle_] = std::make_shared<const GraphNodes>(std::move(capture.nodes));
    return last_handle_;
  }
  GraphExecHandle graph_instantiate(GraphHandle graph) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = graphs_.find(graph);
    if (it == graphs_.end())
      throw_capture_error("cuGraphInstantiateWithFlags", kErrorInvalidHandle,
                          "graph " + std::to_string(graph) + " is not a live graph of cuda:" + std::to_string(index_));
    last_handle_ = new_handle();
    execs_[last_handle_] = it->second;
    return last_handle_;
  }
  void graph_launch(GraphExecHandle exec, StreamHandle stream) override {
    std::shared_ptr<const GraphNodes> nodes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = execs_.find(exec);
      if (it == execs_.end())
        throw_capture_error("cuGraphLaunch", kErrorInvalidHandle,
                            "graph exec " + std::to_string(exec) + " is not a live instantiated graph of cuda:" +
                                std::to_string(index_) + " (destroyed by CudaGraph::reset?)");
      if (Capture *c = capture_of(stream))
        fail_capture(*c, "cuGraphLaunch", stream, kErrorCaptureUnsupported,
                     "the simulator does not capture a graph launch into another capture");
      nodes = it->second;
    }
    for (const GraphNode &node : *nodes)
      replay(node);
  }
  void graph_exec_destroy(GraphExecHandle exec) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!execs_.erase(exec))
      throw_capture_error("cuGraphExecDestroy", kErrorInvalidHandle,
                          "graph exec " + std::to_string(exec) + " is not live (destroyed twice?)");
  }
  void graph_destroy(GraphHandle graph) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!graphs_.erase(graph))
      throw_capture_error("cuGraphDestroy", kErrorInvalidHandle,
                          "graph " + std::to_string(graph) + " is not live (destroyed twice?)");
  }

private:
  static void run_kernel(const sim::HostKernel &kernel, Dim3 grid, Dim3 block, size_t shared_bytes, void **args) {
    sim::launch(kernel, sim::Dim3{grid.x, grid.y, grid.z}, sim::Dim3{block.x, block.y, block.z}, shared_bytes,
                args);
  }
  static void replay(const GraphNode &node) {
    switch (node.kind) {
    case GraphNode::Kind::Kernel: {
      std::vector<void *> args;
      for (const auto &value : node.args)
        args.push_back(const_cast<std::max_align_t *>(value.data()));
      run_kernel(node.kernel, node.grid, node.block, node.shared_bytes, args.data());
      return;
    }
    case GraphNode::Kind::Copy: std::memmove(node.dst, node.src, node.nbytes); return;
    case GraphNode::Kind::Set: std::memset(node.dst, node.value, node.nbytes); return;
    case GraphNode::Kind::Host: node.host(); return;
    }
  }

  /// [p, p + nbytes) lies inside one host_allocate block (mu_ held).
  bool is_pinned(const void *p, size_t nbytes) const {
    const auto address = reinterpret_cast<uintptr_t>(p);
    auto it = pinned_.upper_bound(address);
    if (it == pinned_.begin())
      return false;
    --it;
    return address + nbytes <= it->first + it->second;
  }
  /// The capture in progress on `stream`, or null (mu_ held).
  Capture *capture_of(StreamHandle stream) {
    auto it = captures_.find(stream);
    return it == captures_.end() ? nullptr : &it->second;
  }
  /// The capture that records `api`'s call on `stream`, or null when the
  /// stream is not capturing; throws when the capture was invalidated.
  Capture *recording(StreamHandle stream, const char *api) {
    Capture *c = capture_of(stream);
    if (c && !c->invalidated.empty())
      throw_capture_error(api, kErrorCaptureInvalidated,
                          "stream " + std::to_string(stream) + " of cuda:" + std::to_string(index_) +
                              " is capturing and its capture was invalidated by " + c->invalidated +
                              "; expected cuStreamEndCapture (CudaGraph::capture_end) next");
    return c;
  }
  /// Invalidates `c` with this call as the reason and throws it.
  [[noreturn]] void fail_capture(Capture &c, const char *api, StreamHandle stream, int code, const std::string &why) {
    const std::string what = std::string(api) + " on stream " + std::to_string(stream) + " of cuda:" +
                             std::to_string(index_) + " during its capture: " + why;
    if (c.invalidated.empty())
      c.invalidated = what;
    throw_capture_error(api, code, what + "; the capture is invalidated");
  }
  /// A kernel launch as a graph node: each argument's value copied by the
  /// kernel's parameter sizes.
  GraphNode kernel_node(Capture &c, StreamHandle stream, const KernelFunction &fn, const sim::HostKernel &kernel,
                        Dim3 grid, Dim3 block, size_t shared_bytes, void **args) {
    if (!kernel.arg_sizes)
      fail_capture(c, "cuLaunchKernel", stream, kErrorCaptureUnsupported,
                   "kernel " + kernel.name + "'s library has no parameter sizes (built by an older simulator)");
    std::vector<unsigned long> sizes(kernel.arg_sizes(nullptr));
    kernel.arg_sizes(sizes.data());
    GraphNode node;
    node.kind = GraphNode::Kind::Kernel;
    node.kernel = kernel;
    node.module = fn.module;
    node.grid = grid;
    node.block = block;
    node.shared_bytes = shared_bytes;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::max_align_t> value((sizes[i] + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t) + 1);
      std::memcpy(value.data(), args[i], sizes[i]);
      node.args.push_back(std::move(value));
    }
    return node;
  }

  int index_;
  size_t capacity_;
  std::mutex mu_;
  size_t used_ = 0;
  std::map<void *, size_t> sizes_;
  std::map<EventHandle, double> event_times_;
  uintptr_t last_handle_ = 0; ///< the newest handle this device made
  std::map<uintptr_t, size_t> pinned_;                              ///< host_allocate blocks: address -> bytes
  std::set<StreamHandle> streams_;                                  ///< from stream_create, not destroyed
  std::map<StreamHandle, Capture> captures_;                        ///< captures in progress
  std::map<GraphHandle, std::shared_ptr<const GraphNodes>> graphs_; ///< captured graphs
  std::map<GraphExecHandle, std::shared_ptr<const GraphNodes>> execs_; ///< instantiated graphs
};

} // namespace

std::shared_ptr<DeviceApi> make_simulator_device(int index) { return std::make_shared<SimDevice>(index); }

} // namespace kiln::runtime::cuda
