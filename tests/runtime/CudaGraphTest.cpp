// kiln-cuda-graph-tests: CUDA graphs (kiln/runtime/cuda/CudaGraph.h) on the
// CUDA-on-CPU simulator (KILN_CUDA_SIM=1, two devices), through the CUDA
// backend, its DeviceApi and its caching allocator:
//   - a capture of copies into static inputs, a memset and two real kernels
//     (one with a shared-memory block reduction) records without running;
//     replayed 5 times with new input contents, every output equals running
//     the same calls directly, bit for bit;
//   - a synchronize during the capture, a capture on a stream of another
//     device or on the default stream, a replay after reset: errors naming
//     the call and the bad value;
//   - a second graph sharing the first one's pool allocates no new segment
//     (allocator statistics), and reset returns the pool's memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/CachingAllocator.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CudaError.h"
#include "kiln/runtime/cuda/CudaGraph.h"

namespace kiln::runtime::cuda {
namespace {

const char *kKernels = R"(
extern "C" __global__ void scale_add(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ y,
                                     float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = a * x[i] + w[i];
}
// out[block] += the sum of y*y over the block's elements (tree reduction in shared memory).
extern "C" __global__ void block_square_sum(const float *__restrict__ y, float *__restrict__ out, int n) {
  __shared__ float partial[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? y[i] * y[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[blockIdx.x] += partial[0];
}
)";

constexpr int kN = 1000;
constexpr unsigned kBlock = 128;
constexpr unsigned kBlocks = (kN + kBlock - 1) / kBlock;

struct Sim {
  DeviceBackend *backend = nullptr;
  DeviceApi *api = nullptr;
  CachingAllocator *alloc = nullptr;
  std::vector<KernelFunction> kernels;
  Sim() {
    ::setenv("KILN_CUDA_SIM", "1", 1);
    ::setenv("KILN_SIM_DEVICES", "2", 1);
    std::string why;
    backend = ensure_cuda_backend(&why);
    EXPECT_NE(backend, nullptr) << why;
    api = device_api(0);
    alloc = dynamic_cast<CachingAllocator *>(&backend->allocator(0));
    kernels = api->load_kernels(kKernels, {"scale_add", "block_square_sum"});
  }
};
Sim &sim() {
  static Sim *s = new Sim;
  return *s;
}

/// The device buffers one run of the step uses.
struct StepBuffers {
  float *x = nullptr, *w = nullptr, *y = nullptr, *sums = nullptr;
};

/// The step: host input -> x (a copy into the static input), y = a*x + w,
/// sums = 0, sums[b] += sum(y^2) of block b, sums -> host output.
void enqueue_step(const StepBuffers &b, const float *host_in, float *host_out, float a, StreamHandle s) {
  Sim &t = sim();
  t.api->memcpy_async(b.x, host_in, kN * sizeof(float), CopyKind::HostToDevice, s);
  int n = kN;
  float *x = b.x, *w = b.w, *y = b.y, *sums = b.sums;
  void *args1[] = {&x, &w, &y, &a, &n};
  t.api->launch_kernel(t.kernels[0], {kBlocks}, {kBlock}, 0, s, args1);
  t.api->memset_async(b.sums, 0, kBlocks * sizeof(float), s);
  void *args2[] = {&y, &sums, &n};
  t.api->launch_kernel(t.kernels[1], {kBlocks}, {kBlock}, 0, s, args2);
  t.api->memcpy_async(host_out, b.sums, kBlocks * sizeof(float), CopyKind::DeviceToHost, s);
}

StepBuffers allocate_step(StreamHandle s) {
  Sim &t = sim();
  StepBuffers b;
  b.x = static_cast<float *>(t.alloc->malloc(kN * sizeof(float), s));
  b.w = static_cast<float *>(t.alloc->malloc(kN * sizeof(float), s));
  b.y = static_cast<float *>(t.alloc->malloc(kN * sizeof(float), s));
  b.sums = static_cast<float *>(t.alloc->malloc(kBlocks * sizeof(float), s));
  return b;
}

void free_step(const StepBuffers &b) {
  for (void *p : {static_cast<void *>(b.x), static_cast<void *>(b.w), static_cast<void *>(b.y),
                  static_cast<void *>(b.sums)})
    sim().alloc->free(p);
}

std::vector<float> input(int round) {
  std::vector<float> v(kN);
  for (int i = 0; i < kN; ++i)
    v[i] = static_cast<float>((i * 37 + round * 11) % 101) / 7.0f - 3.0f;
  return v;
}

/// Pinned host floats (DeviceMemory::host_allocate), freed at scope exit.
class PinnedArray {
public:
  PinnedArray(size_t n, float value) : n_(n), data_(static_cast<float *>(sim().api->host_allocate(n * sizeof(float)))) {
    for (size_t i = 0; i < n; ++i)
      data_[i] = value;
  }
  ~PinnedArray() { sim().api->host_free(data_); }
  PinnedArray(const PinnedArray &) = delete;
  PinnedArray &operator=(const PinnedArray &) = delete;
  float *data() const { return data_; }
  float &operator[](size_t i) const { return data_[i]; }
  std::vector<float> to_vector() const { return std::vector<float>(data_, data_ + n_); }

private:
  size_t n_;
  float *data_;
};

template <class F> std::string error_of(F &&body) {
  try {
    body();
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

TEST(CudaGraph, ReplaysEqualDirectLaunchesBitForBit) {
  Sim &t = sim();
  auto stream = t.backend->create_stream(0);
  const StreamHandle s = stream_handle(*stream);
  std::vector<float> weights(kN);
  for (int i = 0; i < kN; ++i)
    weights[i] = 0.01f * static_cast<float>(i % 13);

  // Direct: buffers outside any graph.
  StepBuffers direct = allocate_step(s);
  t.api->memcpy_async(direct.w, weights.data(), kN * sizeof(float), CopyKind::HostToDevice, s);

  // Captured: w written before the capture, the rest allocated in it (from
  // the pool); the host side of the captured copies is pinned memory.
  CudaGraph graph;
  PinnedArray static_in(kN, 0.0f), graph_out(kBlocks, -1.0f);
  float *w = static_cast<float *>(t.alloc->malloc(kN * sizeof(float), s));
  t.api->memcpy_async(w, weights.data(), kN * sizeof(float), CopyKind::HostToDevice, s);
  graph.capture_begin(*stream);
  EXPECT_TRUE(graph.is_capturing());
  StepBuffers captured = allocate_step(s);
  t.alloc->free(captured.w);
  captured.w = w;
  t.api->memset_async(captured.y, 0x7f, kN * sizeof(float), s);
  enqueue_step(captured, static_in.data(), graph_out.data(), 1.5f, s);
  graph.capture_end();
  ASSERT_TRUE(graph.is_captured());
  EXPECT_EQ(graph_out.to_vector(), std::vector<float>(kBlocks, -1.0f))
      << "the capture ran the work instead of recording it";
  const GraphPoolStats pool = t.alloc->graph_pool_stats(graph.pool());
  EXPECT_EQ(pool.use_count, 1);
  EXPECT_GT(pool.allocated_bytes, 0); // x, y, sums

  for (int round = 0; round < 5; ++round) {
    const std::vector<float> in = input(round);
    std::memcpy(static_in.data(), in.data(), kN * sizeof(float)); // new contents of the static input
    graph.replay();
    stream->synchronize();
    std::vector<float> direct_out(kBlocks, -2.0f);
    enqueue_step(direct, in.data(), direct_out.data(), 1.5f, s);
    stream->synchronize();
    EXPECT_EQ(0, std::memcmp(graph_out.data(), direct_out.data(), kBlocks * sizeof(float))) << "round " << round;
    EXPECT_EQ(0, std::memcmp(captured.y, direct.y, kN * sizeof(float))) << "round " << round;
    EXPECT_NE(graph_out[0], 0.0f);
  }
  graph.reset();
  free_step(direct);
  t.alloc->free(captured.x);
  t.alloc->free(captured.y);
  t.alloc->free(captured.sums);
  t.alloc->free(w);
  EXPECT_EQ(t.alloc->graph_pool_stats(graph.pool()).reserved_bytes, 0) << "reset and the frees return the pool";
}

TEST(CudaGraph, SynchronizeDuringCaptureInvalidatesItWithTheReason) {
  Sim &t = sim();
  auto stream = t.backend->create_stream(0);
  const StreamHandle s = stream_handle(*stream);
  StepBuffers b = allocate_step(s);
  PinnedArray in(kN, 1.0f), out(kBlocks, 0.0f);
  CudaGraph graph;
  graph.capture_begin(*stream);
  enqueue_step(b, in.data(), out.data(), 2.0f, s);
  try {
    stream->synchronize();
    FAIL() << "expected a CudaError";
  } catch (const CudaError &e) {
    EXPECT_EQ(e.code(), 900); // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    EXPECT_EQ(e.api(), "cuStreamSynchronize");
    EXPECT_NE(std::string(e.what()).find("cuStreamSynchronize on stream " + std::to_string(s) +
                                         " of cuda:0 during its capture"),
              std::string::npos)
        << e.what();
  }
  try { // later work on the stream: invalidated
    enqueue_step(b, in.data(), out.data(), 2.0f, s);
    FAIL() << "expected a CudaError";
  } catch (const CudaError &e) {
    EXPECT_EQ(e.code(), 901); // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    EXPECT_NE(std::string(e.what()).find("invalidated by cuStreamSynchronize"), std::string::npos) << e.what();
  }
  try {
    graph.capture_end();
    FAIL() << "expected a CudaError";
  } catch (const CudaError &e) {
    EXPECT_EQ(e.code(), 901);
    EXPECT_EQ(e.api(), "cuStreamEndCapture");
    const std::string what = e.what();
    EXPECT_NE(what.find("CudaGraph::capture_end: CudaGraph on cuda:0: the capture failed"), std::string::npos)
        << what;
    EXPECT_NE(what.find("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"), std::string::npos) << what;
    EXPECT_NE(what.find("was invalidated by cuStreamSynchronize"), std::string::npos) << what;
  }
  EXPECT_FALSE(graph.is_captured());
  EXPECT_FALSE(graph.is_capturing());
  EXPECT_EQ(t.alloc->graph_pool_stats(graph.pool()).use_count, 0);
  // The stream works again, and the graph can capture again.
  enqueue_step(b, in.data(), out.data(), 2.0f, s);
  stream->synchronize();
  graph.capture_begin(*stream);
  graph.capture_end();
  graph.replay(); // an empty graph
  graph.reset();
  free_step(b);
}

TEST(CudaGraph, CopyOfPageableHostMemoryDuringCaptureIsAnError) {
  Sim &t = sim();
  auto stream = t.backend->create_stream(0);
  const StreamHandle s = stream_handle(*stream);
  float *x = static_cast<float *>(t.alloc->malloc(kN * sizeof(float), s));
  std::vector<float> pageable(kN, 1.0f);
  CudaGraph graph;
  graph.capture_begin(*stream);
  try {
    t.api->memcpy_async(x, pageable.data(), kN * sizeof(float), CopyKind::HostToDevice, s);
    FAIL() << "expected a CudaError";
  } catch (const CudaError &e) {
    EXPECT_EQ(e.code(), 900);
    EXPECT_NE(std::string(e.what()).find("a copy from pageable host memory (4000 bytes) cannot be captured; "
                                         "expected pinned memory"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(graph.capture_end(), CudaError);
  t.alloc->free(x);
}

TEST(CudaGraph, CaptureOnAnotherDevicesStreamOrTheDefaultStreamIsAnError) {
  Sim &t = sim();
  ASSERT_GE(t.backend->device_count(), 2);
  auto other = t.backend->create_stream(1);
  CudaGraph graph(0);
  EXPECT_EQ(error_of([&] { graph.capture_begin(*other); }),
            "CudaGraph::capture_begin: the stream is on cuda:1, expected a stream of cuda:0 (the graph's device)");
  // The raw handle of device 1's stream: the device itself refuses it.
  const std::string raw = error_of([&] { graph.capture_begin(stream_handle(*other)); });
  EXPECT_NE(raw.find("CUDA_ERROR_INVALID_HANDLE: stream " + std::to_string(stream_handle(*other)) +
                     " is not a stream of cuda:0"),
            std::string::npos)
      << raw;
  EXPECT_FALSE(graph.is_capturing());
  EXPECT_EQ(t.alloc->graph_pool_stats(graph.pool()).use_count, 0) << "a failed capture_begin holds no pool";
  EXPECT_NE(error_of([&] { graph.capture_begin(t.backend->default_stream(0)); })
                .find("the default stream cannot be captured"),
            std::string::npos);
  try {
    t.api->stream_begin_capture(kDefaultStream);
    FAIL() << "expected a CudaError";
  } catch (const CudaError &e) {
    EXPECT_EQ(e.code(), 900);
    EXPECT_NE(std::string(e.what()).find("legacy default stream (0) cannot be captured"), std::string::npos);
  }
}

TEST(CudaGraph, TheCaptureEndsOnTheThreadThatBeganIt) {
  Sim &t = sim();
  auto stream = t.backend->create_stream(0);
  const StreamHandle s = stream_handle(*stream);
  t.api->stream_begin_capture(s);
  std::string from_other_thread;
  std::thread other([&] { from_other_thread = error_of([&] { t.api->stream_end_capture(s); }); });
  other.join();
  EXPECT_NE(from_other_thread.find("cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"),
            std::string::npos)
      << from_other_thread;
  const GraphHandle graph = t.api->stream_end_capture(s); // still capturing: this thread ends it
  const GraphExecHandle exec = t.api->graph_instantiate(graph);
  t.api->graph_launch(exec, s);
  t.api->graph_exec_destroy(exec);
  t.api->graph_destroy(graph);
  EXPECT_NE(error_of([&] { t.api->graph_launch(exec, s); }).find("CUDA_ERROR_INVALID_HANDLE: graph exec"),
            std::string::npos);
}

TEST(CudaGraph, ReplayWithoutACapturedGraphIsAnError) {
  Sim &t = sim();
  auto stream = t.backend->create_stream(0);
  CudaGraph graph;
  EXPECT_EQ(error_of([&] { graph.replay(); }),
            "CudaGraph::replay: CudaGraph on cuda:0 has no captured graph (never captured, or reset; expected "
            "capture_begin and capture_end first)");
  graph.capture_begin(*stream);
  EXPECT_NE(error_of([&] { graph.capture_begin(*stream); }).find("is capturing already"), std::string::npos);
  EXPECT_NE(error_of([&] { graph.replay(); }).find("capturing; expected capture_end first"), std::string::npos);
  graph.capture_end();
  graph.replay();
  graph.reset();
  EXPECT_NE(error_of([&] { graph.replay(); }).find("never captured, or reset"), std::string::npos);
  EXPECT_NE(error_of([&] { graph.capture_end(); }).find("is not capturing"), std::string::npos);
}

TEST(CudaGraph, ASecondGraphSharingThePoolReusesItsBlocks) {
  Sim &t = sim();
  auto stream = t.backend->create_stream(0);
  const StreamHandle s = stream_handle(*stream);
  PinnedArray in(kN, 0.5f), out1(kBlocks, 0.0f), out2(kBlocks, 0.0f);
  const GraphPoolId pool = graph_pool_handle(0);

  // Graph 1 (one "shape"): its buffers are temporaries, freed after the capture.
  CudaGraph first;
  first.capture_begin(*stream, pool);
  StepBuffers b1 = allocate_step(s);
  enqueue_step(b1, in.data(), out1.data(), 1.0f, s);
  first.capture_end();
  free_step(b1);
  const CudaMemoryStats before = t.alloc->memory_stats();
  const GraphPoolStats pool_before = t.alloc->graph_pool_stats(pool);
  EXPECT_EQ(pool_before.allocated_bytes, 0);
  EXPECT_GT(pool_before.reserved_bytes, 0);

  // Graph 2 (another step of the same size) in the same pool: no new segment.
  CudaGraph second;
  second.capture_begin(*stream, pool);
  StepBuffers b2 = allocate_step(s);
  enqueue_step(b2, in.data(), out2.data(), 3.0f, s);
  second.capture_end();
  const CudaMemoryStats after = t.alloc->memory_stats();
  EXPECT_EQ(after.num_device_alloc, before.num_device_alloc);
  EXPECT_EQ(after.graph_pool_reserved_bytes.current, before.graph_pool_reserved_bytes.current);
  EXPECT_EQ(t.alloc->graph_pool_stats(pool).use_count, 2);
  EXPECT_EQ(b2.x, b1.x) << "graph 2 took graph 1's block";
  EXPECT_EQ(second.pool(), pool);

  // Replayed in capture order, each gives its own step's result.
  first.replay();
  second.replay();
  stream->synchronize();
  std::vector<float> expect1(kBlocks), expect2(kBlocks);
  StepBuffers direct = allocate_step(s);
  t.api->memcpy_async(direct.w, b2.w, kN * sizeof(float), CopyKind::DeviceToDevice, s);
  enqueue_step(direct, in.data(), expect2.data(), 3.0f, s);
  EXPECT_EQ(0, std::memcmp(out2.data(), expect2.data(), kBlocks * sizeof(float)));
  free_step(direct);

  first.reset();
  EXPECT_EQ(t.alloc->graph_pool_stats(pool).reserved_bytes, pool_before.reserved_bytes) << "graph 2 still holds it";
  second.reset();
  free_step(b2);
  EXPECT_EQ(t.alloc->graph_pool_stats(pool).reserved_bytes, 0);
  EXPECT_EQ(t.alloc->memory_stats().graph_pool_reserved_bytes.current, 0);
}

} // namespace
} // namespace kiln::runtime::cuda
