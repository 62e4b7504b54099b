// kiln-cuda-driver-tests: the real-GPU DeviceApi (DriverDevice.cpp) and the
// cuBLASLt GEMM's operand mapping, on a machine without a GPU.
//   - DriverDevice runs over the fake libcuda (fake_cuda/FakeCudaDriver.cpp:
//     host memory, recorded launches), through the same pinned-version
//     symbol table as the real driver: properties, the primary context made
//     current, memory and out-of-memory, copies, streams and events, a
//     kernel compiled by NVRTC for sm_90 loaded and launched, and a whole
//     CudaBackend (caching allocator, copies) over it.
//   - plan_gemm's column-major operands, evaluated by a naive column-major
//     GEMM with cuBLASLt's semantics (D = op(A) op(B)), must give the
//     row-major product a x b for dense, transposed, batched and broadcast
//     views.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "CublasLtGemm.h"
#include "DriverLibrary.h"
#include "kiln/runtime/cuda/CachingAllocator.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CudaError.h"
#include "kiln/runtime/cuda/CudaGraph.h"
#include "kiln/runtime/cuda/Nvrtc.h"

namespace cuda = kiln::runtime::cuda;
using kiln::runtime::Buffer;
using kiln::runtime::TensorView;

namespace {

/// The fake driver's table (loaded once per process) and its test hooks.
struct Fake {
  cuda::DriverLibrary library = cuda::load_driver_library(KILN_FAKE_CUDA_DRIVER);
  void (*last_launch)(long long *) = nullptr;
  size_t (*allocated)() = nullptr;
  size_t (*take_calls)(char *, size_t) = nullptr;
  Fake() {
    void *h = dlopen(KILN_FAKE_CUDA_DRIVER, RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      last_launch = reinterpret_cast<void (*)(long long *)>(dlsym(h, "kiln_fake_cuda_last_launch"));
      allocated = reinterpret_cast<size_t (*)()>(dlsym(h, "kiln_fake_cuda_allocated"));
      take_calls = reinterpret_cast<size_t (*)(char *, size_t)>(dlsym(h, "kiln_fake_cuda_take_calls"));
    }
  }
};
Fake &fake() {
  static Fake *f = new Fake;
  return *f;
}

std::shared_ptr<cuda::DeviceApi> fake_device(cuda::NvrtcCompiler &nvrtc) {
  EXPECT_TRUE(fake().library.loaded()) << fake().library.error;
  return cuda::make_driver_device(fake().library.symbols, 0, nvrtc);
}

const char *kAddOne = R"(extern "C" __global__ void add_one(const float *__restrict__ x, float *__restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = x[i] + 1.0f;
}
)";

} // namespace

TEST(DriverDevice, ReportsTheDevicesProperties) {
  cuda::NvrtcCompiler nvrtc;
  auto dev = fake_device(nvrtc);
  const cuda::DeviceProperties p = dev->properties();
  EXPECT_EQ(p.name, "Kiln fake GPU");
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.minor, 0);
  EXPECT_EQ(p.multiprocessors, 132);
  EXPECT_EQ(p.max_shared_bytes_per_block, 232448u);
  EXPECT_EQ(p.total_memory_bytes, size_t{1} << 30);
  EXPECT_FALSE(p.host_accessible);
}

TEST(DriverDevice, AllocatesCopiesAndReportsOutOfMemoryAsNull) {
  cuda::NvrtcCompiler nvrtc;
  auto dev = fake_device(nvrtc);
  ASSERT_NE(fake().allocated, nullptr);
  const size_t before = fake().allocated();
  void *d = dev->raw_allocate(4096);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(fake().allocated(), before + 4096);
  EXPECT_EQ(dev->mem_get_info().free_bytes, (size_t{1} << 30) - before - 4096);
  std::vector<int> host(1024), back(1024, 0);
  for (int i = 0; i < 1024; ++i) host[i] = 3 * i;
  const cuda::StreamHandle s = dev->stream_create();
  dev->memcpy_async(d, host.data(), 4096, cuda::CopyKind::HostToDevice, s);
  dev->memset_async(static_cast<char *>(d) + 4, 0, 4, s);
  dev->memcpy_async(back.data(), d, 4096, cuda::CopyKind::DeviceToHost, s);
  dev->stream_synchronize(s);
  EXPECT_EQ(back[0], 0);
  EXPECT_EQ(back[1], 0);
  EXPECT_EQ(back[1023], 3069);
  dev->stream_destroy(s);
  dev->raw_free(d);
  EXPECT_EQ(fake().allocated(), before);
  EXPECT_EQ(dev->raw_allocate(size_t{2} << 30), nullptr); // beyond the device: null, not a throw
  void *pinned = dev->host_allocate(100);
  EXPECT_NE(pinned, nullptr);
  dev->host_free(pinned);
}

TEST(DriverDevice, EventsRecordQueryAndTime) {
  cuda::NvrtcCompiler nvrtc;
  auto dev = fake_device(nvrtc);
  const cuda::EventHandle a = dev->timed_event_create(), b = dev->timed_event_create(), c = dev->event_create();
  EXPECT_NE(a, 0u);
  dev->event_record(a, cuda::kDefaultStream);
  dev->event_record(b, cuda::kDefaultStream);
  dev->event_record(c, cuda::kDefaultStream);
  EXPECT_TRUE(dev->event_query(c));
  dev->event_synchronize(b);
  EXPECT_DOUBLE_EQ(dev->event_elapsed_seconds(a, b), 0.0015); // the fake's 1.5 ms, in seconds
  dev->stream_wait_event(cuda::kDefaultStream, c);
  for (cuda::EventHandle e : {a, b, c}) dev->event_destroy(e);
}

TEST(DriverDevice, LoadsAnNvrtcCubinAndLaunchesIt) {
  if (!cuda::nvrtc_available()) GTEST_SKIP() << "skipped: " << cuda::nvrtc_unavailable_reason();
  cuda::NvrtcCompilerOptions options;
  options.cache_dir = "";
  cuda::NvrtcCompiler nvrtc(options);
  auto dev = fake_device(nvrtc);
  const std::vector<cuda::KernelFunction> fns = dev->load_kernels(kAddOne, {"add_one"});
  ASSERT_EQ(fns.size(), 1u);
  EXPECT_EQ(fns[0].name, "add_one");
  EXPECT_EQ(nvrtc.stats().misses, 1); // compiled for the device's sm_90 (the fake accepts only an ELF CUBIN)
  void *x = nullptr, *y = nullptr;
  int n = 1000;
  void *args[] = {&x, &y, &n};
  dev->launch_kernel(fns[0], {4, 1, 1}, {256, 1, 1}, 64 * 1024, cuda::kDefaultStream, args);
  long long launch[9] = {};
  fake().last_launch(launch);
  EXPECT_EQ(launch[0], 4);
  EXPECT_EQ(launch[3], 256);
  EXPECT_EQ(launch[6], 64 * 1024); // over 48 KiB: the opt-in attribute was set first
  EXPECT_EQ(launch[7], 1000);      // the parameters reached the driver
  EXPECT_THROW(dev->launch_kernel(fns[0], {1, 1, 1}, {32, 1, 1}, 300 * 1024, cuda::kDefaultStream, args),
               std::runtime_error); // more shared memory than the device has
}

TEST(DriverDevice, ACudaBackendOverItAllocatesAndCopies) {
  cuda::NvrtcCompiler nvrtc;
  auto backend = cuda::make_cuda_backend({fake_device(nvrtc)});
  EXPECT_FALSE(backend->host_accessible());
  const kiln::Device gpu(kiln::DeviceType::CUDA, 0), cpu(kiln::DeviceType::CPU, 0);
  std::vector<float> host(300), back(300, 0.f);
  for (int i = 0; i < 300; ++i) host[i] = 0.25f * i;
  {
    auto buf = Buffer::make(host.size() * sizeof(float), backend->allocator(0));
    backend->copy(buf->data(), gpu, host.data(), cpu, host.size() * sizeof(float));
    backend->copy(back.data(), cpu, buf->data(), gpu, host.size() * sizeof(float));
  }
  EXPECT_EQ(back, host);
}

// ---- cuBLASLt's column-major operands ------------------------------------------

namespace {

/// A row-major-strided view over `data` (float32 elements; no buffer
/// needed: plan_gemm reads only sizes and strides).
TensorView view(std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TensorView v;
  v.sizes = std::move(sizes);
  v.strides = std::move(strides);
  return v;
}

/// Element (i, j) of a column-major stored operand, op() applied.
double op_at(const cuda::LtOperand &o, const float *base, int64_t batch, int64_t i, int64_t j) {
  const int64_t r = o.transposed ? j : i, c = o.transposed ? i : j;
  return base[batch * o.batch_stride + r + c * o.ld];
}

/// cuBLASLt's D = op(A) op(B) by the plan, naively, with A = b's data and
/// B = a's (the plan's convention); D written column-major by the plan.
void lt_reference(const cuda::GemmPlan &p, const float *a, const float *b, float *d) {
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (int64_t k = 0; k < p.k; ++k) s += op_at(p.a, b, bi, i, k) * op_at(p.b, a, bi, k, j);
        d[bi * p.d.batch_stride + i + j * p.d.ld] = static_cast<float>(s);
      }
}

/// Checks the plan for a (sizes/strides over `adata`) x b against the
/// row-major product computed straight from the strides.
void expect_plan_computes_the_product(TensorView a, const std::vector<float> &adata, TensorView b,
                                      const std::vector<float> &bdata) {
  const size_t r = a.sizes.size();
  const int64_t B = r == 3 ? a.sizes[0] : 1, M = a.sizes[r - 2], K = a.sizes[r - 1], N = b.sizes[r - 1];
  TensorView c = r == 3 ? view({B, M, N}, {M * N, N, 1}) : view({M, N}, {N, 1});
  const cuda::GemmPlan p = cuda::plan_gemm(a, b, c);
  std::vector<float> got(static_cast<size_t>(B * M * N), -1.f);
  lt_reference(p, adata.data(), bdata.data(), got.data());
  for (int64_t bi = 0; bi < B; ++bi)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double want = 0;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t ai = (r == 3 ? bi * a.strides[0] : 0) + i * a.strides[r - 2] + k * a.strides[r - 1];
          const int64_t bk = (r == 3 ? bi * b.strides[0] : 0) + k * b.strides[r - 2] + j * b.strides[r - 1];
          want += static_cast<double>(adata[ai]) * bdata[bk];
        }
        EXPECT_FLOAT_EQ(got[bi * M * N + i * N + j], static_cast<float>(want)) << bi << " " << i << " " << j;
      }
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7) % 11) - 2.f;
  return v;
}

} // namespace

namespace {

/// The fake driver's call log since the last call (and clears it).
std::string take_calls() {
  std::vector<char> text(1 << 16);
  fake().take_calls(text.data(), text.size());
  return text.data();
}

std::string hex(uintptr_t v) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

/// The handle after `prefix` in `log` (e.g. the graph cuGraphInstantiateWithFlags got).
std::string handle_after(const std::string &log, const std::string &prefix) {
  const size_t at = log.find(prefix);
  if (at == std::string::npos) return "?";
  const size_t start = at + prefix.size();
  return log.substr(start, log.find_first_of(",)", start) - start);
}

} // namespace

// CudaGraph over the driver: the exact driver calls of a capture, two
// replays and a reset (thread-local capture mode, flags 0, the graph and its
// instantiation destroyed).
TEST(DriverDevice, CudaGraphMakesTheDriverCallsOfCaptureReplayAndReset) {
  cuda::NvrtcCompiler nvrtc;
  auto dev = fake_device(nvrtc);
  ASSERT_NE(fake().take_calls, nullptr);
  cuda::CachingAllocator alloc(*dev, 0);
  const cuda::StreamHandle s = dev->stream_create();
  char function_object = 0;
  const cuda::KernelFunction fn{"add_one", &function_object, nullptr};
  std::vector<float> host(1024, 1.0f);
  take_calls();

  cuda::CudaGraph graph(*dev, alloc, 0);
  graph.capture_begin(s);
  void *x = alloc.malloc(4096, s); // from the graph's pool: a cuMemAlloc, not captured
  void *y = alloc.malloc(4096, s);
  int n = 1024;
  void *args[] = {&x, &y, &n};
  dev->memcpy_async(x, host.data(), 4096, cuda::CopyKind::HostToDevice, s);
  dev->launch_kernel(fn, {4, 1, 1}, {256, 1, 1}, 0, s, args);
  graph.capture_end();
  graph.replay();
  graph.replay();
  graph.reset();
  const std::string log = take_calls();
  const std::string S = hex(s);
  const std::string G = handle_after(log, "cuGraphInstantiateWithFlags(");
  const std::string E = handle_after(log, "cuGraphLaunch(");
  EXPECT_EQ(log, "cuStreamBeginCapture(" + S + ", mode=1)\n"
                 "cuMemcpyAsync(" + S + ")\n"
                 "cuLaunchKernel(" + S + ")\n"
                 "cuStreamEndCapture(" + S + ")\n"
                 "cuGraphInstantiateWithFlags(" + G + ", flags=0)\n"
                 "cuGraphLaunch(" + E + ", " + S + ")\n"
                 "cuGraphLaunch(" + E + ", " + S + ")\n"
                 "cuGraphExecDestroy(" + E + ")\n"
                 "cuGraphDestroy(" + G + ")\n");
  EXPECT_EQ(alloc.graph_pool_stats(graph.pool()).use_count, 0);
  alloc.free(x);
  alloc.free(y);
  dev->stream_destroy(s);
}

// A synchronize during the capture: the driver's error names the call and
// the status, and capture_end reports the invalidated capture; nothing is
// instantiated.
TEST(DriverDevice, CudaGraphReportsASynchronizeDuringCapture) {
  cuda::NvrtcCompiler nvrtc;
  auto dev = fake_device(nvrtc);
  ASSERT_NE(fake().take_calls, nullptr);
  cuda::CachingAllocator alloc(*dev, 0);
  const cuda::StreamHandle s = dev->stream_create();
  take_calls();
  cuda::CudaGraph graph(*dev, alloc, 0);
  graph.capture_begin(s);
  try {
    dev->stream_synchronize(s);
    FAIL() << "expected a CudaError";
  } catch (const cuda::CudaError &e) {
    EXPECT_EQ(e.code(), 900);
    EXPECT_NE(std::string(e.what()).find("cuStreamSynchronize failed: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
              std::string::npos)
        << e.what();
  }
  try {
    graph.capture_end();
    FAIL() << "expected a CudaError";
  } catch (const cuda::CudaError &e) {
    EXPECT_EQ(e.code(), 901);
    EXPECT_NE(std::string(e.what()).find("CudaGraph::capture_end: CudaGraph on cuda:0: the capture failed: "
                                         "cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(graph.is_captured());
  const std::string S = hex(s);
  EXPECT_EQ(take_calls(), "cuStreamBeginCapture(" + S + ", mode=1)\n"
                          "cuStreamSynchronize(" + S + ")\n"
                          "cuStreamEndCapture(" + S + ")\n");
  dev->stream_destroy(s);
}

TEST(CublasLtPlan, DenseRowMajorOperands) {
  expect_plan_computes_the_product(view({3, 4}, {4, 1}), ramp(12, 0.5f), view({4, 5}, {5, 1}), ramp(20, 0.25f));
}

TEST(CublasLtPlan, TransposedViewsUseTheOtherOperation) {
  // a = (a' [4, 3])^T, b = (b' [5, 4])^T: dense columns, passed with CUBLAS_OP_T.
  const cuda::GemmPlan p =
      cuda::plan_gemm(view({3, 4}, {1, 3}), view({4, 5}, {1, 4}), view({3, 5}, {5, 1}));
  EXPECT_TRUE(p.a.transposed);
  EXPECT_TRUE(p.b.transposed);
  expect_plan_computes_the_product(view({3, 4}, {1, 3}), ramp(12, 0.5f), view({4, 5}, {1, 4}), ramp(20, 0.25f));
  expect_plan_computes_the_product(view({3, 4}, {4, 1}), ramp(12, 0.5f), view({4, 5}, {1, 4}), ramp(20, 0.25f));
}

TEST(CublasLtPlan, PaddedLeadingDimensionsAndSizeOneDims) {
  expect_plan_computes_the_product(view({3, 4}, {6, 1}), ramp(18, 0.5f), view({4, 5}, {7, 1}), ramp(28, 0.25f));
  expect_plan_computes_the_product(view({1, 4}, {1, 1}), ramp(4, 0.5f), view({4, 1}, {1, 1}), ramp(4, 0.25f));
  expect_plan_computes_the_product(view({1, 4}, {9, 2}), ramp(8, 0.5f), view({4, 3}, {3, 1}), ramp(12, 0.25f));
}

TEST(CublasLtPlan, BatchedWithABroadcastOperand) {
  expect_plan_computes_the_product(view({2, 3, 4}, {12, 4, 1}), ramp(24, 0.5f), view({2, 4, 5}, {0, 5, 1}),
                                   ramp(20, 0.25f));
  expect_plan_computes_the_product(view({2, 3, 4}, {12, 1, 3}), ramp(24, 0.5f), view({2, 4, 5}, {20, 5, 1}),
                                   ramp(40, 0.25f));
}

TEST(CublasLtPlan, RejectsAnOperandWithoutADenseDimension) {
  try {
    cuda::plan_gemm(view({3, 4}, {8, 2}), view({4, 5}, {5, 1}), view({3, 5}, {5, 1}));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument &e) {
    EXPECT_NE(std::string(e.what()).find("operand a [3, 4] strides [8, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::plan_gemm(view({3, 4}, {4, 1}), view({5, 5}, {5, 1}), view({3, 5}, {5, 1})),
               std::invalid_argument);
}
