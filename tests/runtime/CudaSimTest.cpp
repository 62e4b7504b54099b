// The CUDA-on-CPU simulator on kernels that are correct: results against
// closed forms (pointwise, block reduction with shared memory and warp
// shuffles, dynamic shared memory, atomics, 2D/3D grids), the compile
// cache, and the seeded order.
#include "CudaSimSupport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <thread>
#include <time.h>
#include <unistd.h>

namespace kiln::runtime::sim::test {
namespace {

const char *kPointwise = R"(
extern "C" __global__ void axpb(const float *__restrict__ x, float *__restrict__ y, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
)";

TEST(CudaSim, PointwiseMatchesClosedForm) {
  const int n = 1000;
  DeviceArray<float> x(n, "x"), y(n, "y");
  for (int i = 0; i < n; ++i) x[i] = float(i);
  float *xp = x.data(), *yp = y.data(), a = 2.0f, b = 1.0f;
  int count = n;
  void *args[] = {&xp, &yp, &a, &b, &count}; // cuLaunchKernel's convention
  launch(kernel_from(kPointwise, "axpb"), {(n + 127) / 128}, {128}, 0, args);
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], 2.0f * float(i) + 1.0f) << "element " << i;
}

const char *kBlockSum = R"(
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
extern "C" __global__ void block_sum(const float *__restrict__ in, float *__restrict__ out, int n) {
  __shared__ float warp_sums[32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int i = blockIdx.x * blockDim.x + tid;
  float v = warp_sum(i < n ? in[i] : 0.0f);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_down_sync(0xffffffffu, s, offset);
    if (lane == 0) out[blockIdx.x] = s;
  }
}
)";

TEST(CudaSim, BlockReductionWithSharedMemoryAndShuffles) {
  const int n = 3000;
  for (int threads : {256, 1024}) { // 1024: every thread of a full block alive at the barrier
    const int blocks = (n + threads - 1) / threads;
    DeviceArray<float> in(n, "in"), out(blocks, "out");
    for (int i = 0; i < n; ++i) in[i] = float(i);
    float *ip = in.data(), *op = out.data();
    int count = n;
    void *args[] = {&ip, &op, &count};
    launch(kernel_from(kBlockSum, "block_sum"), {uint32_t(blocks)}, {uint32_t(threads)}, 0, args);
    for (int b = 0; b < blocks; ++b) {
      // sum of i for i in [lo, hi): (lo + hi - 1) * (hi - lo) / 2, exact in float (< 2^24).
      long lo = long(b) * threads, hi = std::min<long>(n, lo + threads);
      EXPECT_EQ(out[b], float((lo + hi - 1) * (hi - lo) / 2)) << threads << " threads, block " << b;
    }
  }
}

const char *kWarpScan = R"(
extern "C" __global__ void warp_scan(const int *in, int *scan, int *broadcast, unsigned *ballot) {
  const int lane = threadIdx.x % 32;
  int v = in[threadIdx.x];
  for (int d = 1; d < 32; d <<= 1) {
    int up = __shfl_up_sync(0xffffffffu, v, d);
    if (lane >= d) v += up;
  }
  scan[threadIdx.x] = v;
  broadcast[threadIdx.x] = __shfl_sync(0xffffffffu, in[threadIdx.x], 7);
  unsigned b = __ballot_sync(0xffffffffu, in[threadIdx.x] % 3 == 0);
  if (lane == 0) ballot[threadIdx.x / 32] = b;
}
)";

TEST(CudaSim, ShuffleUpIndexAndBallotFollowCudaRules) {
  const int n = 64;
  DeviceArray<int> in(n), scan(n), bcast(n);
  DeviceArray<unsigned> ballot(2);
  for (int i = 0; i < n; ++i) in[i] = i;
  int *a = in.data(), *s = scan.data(), *c = bcast.data();
  unsigned *b = ballot.data();
  void *args[] = {&a, &s, &c, &b};
  launch(kernel_from(kWarpScan, "warp_scan"), {1}, {n}, 0, args);
  for (int i = 0; i < n; ++i) {
    int w = i / 32 * 32;
    EXPECT_EQ(scan[i], (w + i) * (i - w + 1) / 2) << "inclusive prefix sum within the warp, thread " << i;
    EXPECT_EQ(bcast[i], w + 7) << "lane 7 of the warp";
  }
  for (int w = 0; w < 2; ++w) {
    unsigned expected = 0;
    for (int l = 0; l < 32; ++l) expected |= unsigned((w * 32 + l) % 3 == 0) << l;
    EXPECT_EQ(ballot[w], expected);
  }
}

const char *kReverse = R"(
extern "C" __global__ void reverse_blocks(const float *in, float *out) {
  extern __shared__ unsigned char kiln_smem[];
  float *buf = reinterpret_cast<float *>(kiln_smem);
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  buf[t] = in[i];
  __syncthreads();
  out[i] = buf[blockDim.x - 1 - t];
}
)";

TEST(CudaSim, DynamicSharedMemoryIsPerBlock) {
  const int threads = 128, blocks = 6, n = threads * blocks;
  DeviceArray<float> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = float(i);
  float *a = in.data(), *b = out.data();
  void *args[] = {&a, &b};
  launch(kernel_from(kReverse, "reverse_blocks"), {blocks}, {threads}, threads * sizeof(float), args);
  for (int i = 0; i < n; ++i) {
    int block = i / threads, t = i % threads;
    ASSERT_EQ(out[i], float(block * threads + threads - 1 - t)) << "element " << i;
  }
}

const char *kHistogram = R"(
extern "C" __global__ void histogram(const int *in, int *bins, int n, int nbins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&bins[in[i] % nbins], 1);
}
)";

TEST(CudaSim, HistogramWithIntegerAtomics) {
  const int n = 10000, nbins = 16;
  DeviceArray<int> in(n), bins(nbins);
  for (int i = 0; i < n; ++i) in[i] = i * 7 + 3;
  int *a = in.data(), *b = bins.data();
  int count = n, nb = nbins;
  void *args[] = {&a, &b, &count, &nb};
  launch(kernel_from(kHistogram, "histogram"), {8}, {128}, 0, args);
  std::vector<int> expected(nbins, 0);
  for (int i = 0; i < n; ++i) expected[(i * 7 + 3) % nbins]++;
  EXPECT_EQ(bins.to_vector(), expected);
}

const char *kCoordinates = R"(
extern "C" __global__ void coordinates(int *out, int width, int height) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int z = blockIdx.z * blockDim.z + threadIdx.z;
  atomicAdd(&out[(z * height + y) * width + x], x + 100 * y + 10000 * z + 1);
}
)";

TEST(CudaSim, MultiBlockGridsIn2DAnd3D) {
  for (Dim3 grid : {Dim3{3, 4, 1}, Dim3{3, 4, 2}}) {
    const Dim3 block{4, 2, 3};
    int w = int(grid.x * block.x), h = int(grid.y * block.y), d = int(grid.z * block.z);
    DeviceArray<int> out(size_t(w * h * d));
    int *o = out.data();
    void *args[] = {&o, &w, &h};
    launch(kernel_from(kCoordinates, "coordinates"), grid, block, 0, args);
    for (int z = 0; z < d; ++z)
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
          ASSERT_EQ(out[size_t((z * h + y) * w + x)], x + 100 * y + 10000 * z + 1)
              << "grid " << to_string(grid) << " at (" << x << "," << y << "," << z << "): written once";
  }
}

const char *kOrder = R"(
extern "C" __global__ void arrival_order(int *order, int *counter) {
  order[threadIdx.x] = atomicAdd(counter, 1);
}
)";

std::vector<int> arrival_order(uint64_t seed) {
  SimConfig saved = config(), c = saved;
  c.seed = seed;
  set_config(c);
  DeviceArray<int> order(256), counter(1);
  int *o = order.data(), *k = counter.data();
  void *args[] = {&o, &k};
  launch(kernel_from(kOrder, "arrival_order"), {1}, {256}, 0, args);
  set_config(saved);
  return order.to_vector();
}

TEST(CudaSim, SameSeedSameInterleaving) {
  std::vector<int> first = arrival_order(7), again = arrival_order(7), other = arrival_order(8);
  std::vector<int> identity(256);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  EXPECT_NE(first, identity) << "threads must not run in index order";
  std::vector<int> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, identity) << "each thread got one ticket";
}

const char *kPreludeNames = R"(
extern "C" __global__ void prelude_names(const float *x, float *out, int *ints, unsigned long long *wide,
                                         float *fsum) {
  const int t = threadIdx.x;
  const float v = x[t];
  out[t * 8 + 0] = expf(v) - __expf(v);
  out[t * 8 + 1] = rsqrtf(v * v + 1.0f) * sqrtf(v * v + 1.0f);
  out[t * 8 + 2] = tanhf(v) + erff(v) - fminf(v, 0.5f) + max(v, 0.25f);
  out[t * 8 + 3] = isnan(logf(-1.0f - v * v)) ? 1.0f : 0.0f;
  out[t * 8 + 4] = __int_as_float(__float_as_int(v)) - v + (float)__popc(0xf0u) + (float)min(t, 3);
  out[t * 8 + 5] = __fdividef(v, 2.0f) + fmaf(v, v, 1.0f) + __saturatef(v);
  out[t * 8 + 6] = (float)__clz(1) + powf(2.0f, 3.0f) + floorf(v) + ceilf(v);
  out[t * 8 + 7] = copysignf(1.0f, -v) + fabsf(-v);
  atomicMax(&ints[0], t);
  atomicMin(&ints[1], -t);
  atomicCAS(&ints[2], 0, 7);
  atomicExch(&ints[3], 5);
  atomicOr(&ints[4], 1 << (t % 8));
  atomicAdd(&wide[0], 1ull << 33);
  atomicAdd(fsum, 0.5f);
  __syncwarp();
}
)";

TEST(CudaSim, PreludeMathIntrinsicsAndAtomics) {
  DeviceArray<float> x(32), out(32 * 8), fsum(1);
  DeviceArray<int> ints(5);
  DeviceArray<unsigned long long> wide(1);
  for (int i = 0; i < 32; ++i) x[i] = 0.125f * float(i);
  float *xp = x.data(), *op = out.data(), *fp = fsum.data();
  int *ip = ints.data();
  unsigned long long *wp = wide.data();
  void *args[] = {&xp, &op, &ip, &wp, &fp};
  launch(kernel_from(kPreludeNames, "prelude_names"), {1}, {32}, 0, args);
  for (int t = 0; t < 32; ++t) {
    const float v = x[t];
    const float *o = &out[size_t(t) * 8];
    EXPECT_EQ(o[0], 0.0f) << "__expf is expf here";
    EXPECT_NEAR(o[1], 1.0f, 1e-6f);
    EXPECT_NEAR(o[2], std::tanh(v) + std::erf(v) - std::fmin(v, 0.5f) + std::fmax(v, 0.25f), 1e-6f);
    EXPECT_EQ(o[3], 1.0f);
    EXPECT_EQ(o[4], 4.0f + float(std::min(t, 3)));
    EXPECT_NEAR(o[5], v / 2 + (v * v + 1) + std::min(std::max(v, 0.0f), 1.0f), 1e-6f);
    EXPECT_EQ(o[6], 31.0f + 8.0f + std::floor(v) + std::ceil(v));
    EXPECT_EQ(o[7], -1.0f + v) << "copysignf(1, -0) is -1 too";
  }
  EXPECT_EQ(ints[0], 31);
  EXPECT_EQ(ints[1], -31);
  EXPECT_EQ(ints[2], 7);
  EXPECT_EQ(ints[3], 5);
  EXPECT_EQ(ints[4], 0xff);
  EXPECT_EQ(wide[0], 32ull << 33);
  EXPECT_EQ(fsum[0], 16.0f);
}

/// Sets KILN_CACHE_DIR to a fresh directory for the test's lifetime and
/// empties the in-memory cache.
class FreshCacheDir {
public:
  FreshCacheDir() {
    char tmpl[] = "/tmp/kiln-sim-cache-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    const char *old = std::getenv("KILN_CACHE_DIR");
    had_old_ = old != nullptr;
    if (old) old_ = old;
    setenv("KILN_CACHE_DIR", dir_.c_str(), 1);
    clear_memory_cache(); // so a repeated test compiles again
  }
  ~FreshCacheDir() {
    if (had_old_)
      setenv("KILN_CACHE_DIR", old_.c_str(), 1);
    else
      unsetenv("KILN_CACHE_DIR");
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

private:
  std::string dir_, old_;
  bool had_old_ = false;
};

TEST(CudaSimCache, SecondLoadDoesNotRunTheCompiler) {
  FreshCacheDir cache;
  const std::string source = std::string(kPointwise) + "// cache test\n";
  const uint64_t before = compile_stats().compiler_invocations;
  auto first = load_module(source);
  EXPECT_EQ(compile_stats().compiler_invocations, before + 1);
  const uint64_t memory_hits = compile_stats().memory_hits;
  auto again = load_module(source);
  EXPECT_EQ(again.get(), first.get());
  EXPECT_EQ(compile_stats().memory_hits, memory_hits + 1);
  clear_memory_cache();
  const uint64_t disk_hits = compile_stats().disk_hits;
  auto from_disk = load_module(source);
  EXPECT_EQ(compile_stats().compiler_invocations, before + 1) << "the disk cache must serve it";
  EXPECT_EQ(compile_stats().disk_hits, disk_hits + 1);
  EXPECT_EQ(from_disk->key(), first->key());
}

TEST(CudaSimCache, DisabledCacheCompilesInATemporaryDirectory) {
  setenv("KILN_DISABLE_CACHE", "1", 1);
  clear_memory_cache();
  const std::string source = std::string(kPointwise) + "// no disk cache\n";
  const uint64_t before = compile_stats().compiler_invocations;
  HostKernel k = kernel_from(source, "axpb");
  unsetenv("KILN_DISABLE_CACHE");
  EXPECT_EQ(compile_stats().compiler_invocations, before + 1);
  DeviceArray<float> x(4), y(4);
  float *xp = x.data(), *yp = y.data(), a = 1.0f, b = 2.0f;
  int n = 4;
  void *args[] = {&xp, &yp, &a, &b, &n};
  launch(k, {1}, {4}, 0, args); // still loaded after its files were removed
  EXPECT_EQ(y[3], 2.0f);
}

TEST(CudaSimCache, ThreadsCompileDifferentKernelsAtOnceAndShareOne) {
  FreshCacheDir cache;
  const uint64_t before = compile_stats().compiler_invocations;
  std::vector<std::shared_ptr<const HostModule>> modules(4);
  const int variant[4] = {0, 0, 2, 3}; // threads 0 and 1 ask for the same source: one compile serves both
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      modules[size_t(i)] = load_module(std::string(kPointwise) + "// variant " + std::to_string(variant[i]) + "\n");
    });
  for (std::thread &t : threads) t.join();
  EXPECT_EQ(modules[0].get(), modules[1].get());
  EXPECT_NE(modules[2].get(), modules[3].get());
  EXPECT_EQ(compile_stats().compiler_invocations, before + 3);
}

TEST(CudaSimCache, CompilerErrorsNameTheKernel) {
  const char *bad = R"(
extern "C" __global__ void broken_kernel(float *x) { x[0] = undefined_name; }
)";
  try {
    load_module(bad);
    FAIL() << "expected a CompileError";
  } catch (const CompileError &e) {
    EXPECT_NE(std::string(e.what()).find("'broken_kernel'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("undefined_name"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_module("int not_a_kernel;"), CompileError);
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

TEST(CudaSimMeasure, CompileLoadAndPointwiseThroughput) {
  // Numbers for sizing CI (printed, not asserted): a fresh compile, a load
  // from the disk cache, and elements/s of a 1M-element pointwise kernel.
  FreshCacheDir cache;
  const std::string source = std::string(kPointwise) + "// measure\n";
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  auto module = load_module(source);
  auto t1 = clock::now();
  clear_memory_cache();
  load_module(source);
  auto t2 = clock::now();
  const int n = 1 << 20;
  DeviceArray<float> x(n), y(n);
  float *xp = x.data(), *yp = y.data(), a = 3.0f, b = -1.0f;
  int count = n;
  void *args[] = {&xp, &yp, &a, &b, &count};
  HostKernel k = module->kernel("axpb");
  launch(k, {n / 256}, {256}, 0, args); // warm the pool and stacks
  auto t3 = clock::now();
  const double cpu_before = process_cpu_seconds();
  launch(k, {n / 256}, {256}, 0, args);
  const double cpu = process_cpu_seconds() - cpu_before; // all OS threads; less sensitive to a busy machine
  auto t4 = clock::now();
  std::chrono::duration<double> compile = t1 - t0, cached = t2 - t1, run = t4 - t3;
  std::cout << "cuda-sim: host compile " << compile.count() * 1e3 << " ms, cached load " << cached.count() * 1e3
            << " ms, pointwise 1M elements " << run.count() * 1e3 << " ms (" << n / run.count() / 1e6
            << " M elements/s on " << (config().threads ? config().threads : std::thread::hardware_concurrency())
            << " OS threads; " << n / cpu / 1e6 << " M elements per CPU second)\n";
  EXPECT_EQ(y[n - 1], 3.0f * 0.0f - 1.0f);
}

} // namespace
} // namespace kiln::runtime::sim::test
