// The simulator's strictness: each broken kernel fails with a KernelError
// that names the kernel, the block and the thread (issue 14's negative
// tests), the launch limits, and a kernel that relies on lockstep gives a
// wrong result under the random order, as does a missing barrier before
// shared memory is reused (a leading warp runs ahead).
#include "CudaSimSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <sys/mman.h>

namespace kiln::runtime::sim::test {
namespace {


#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

TEST(CudaSimStrict, DivergentSyncthreadsNamesTheThreadThatSkippedIt) {
  const char *src = R"(
extern "C" __global__ void divergent_barrier(float *out) {
  if (threadIdx.x < 16)
    __syncthreads();
  out[threadIdx.x] = 1.0f;
}
)";
  DeviceArray<float> out(32);
  float *o = out.data();
  void *args[] = {&o};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "divergent_barrier"), {1}, {32}, 0, args); });
  EXPECT_CONTAINS(msg, "kernel 'divergent_barrier' block (0,0,0) thread (16,0,0)");
  EXPECT_CONTAINS(msg, "exited without reaching the __syncthreads on line 4");
  EXPECT_CONTAINS(msg, "thread (0,0,0) at __syncthreads on line 4");
}

TEST(CudaSimStrict, BarriersAtDifferentLinesAreAnError) {
  const char *src = R"(
extern "C" __global__ void two_barriers(float *out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}
)";
  DeviceArray<float> out(1);
  float *o = out.data();
  void *args[] = {&o};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "two_barriers"), {1}, {8}, 0, args); });
  EXPECT_CONTAINS(msg, "kernel 'two_barriers' block (0,0,0) thread (1,0,0)");
  EXPECT_CONTAINS(msg, "__syncthreads on line 6");
  EXPECT_CONTAINS(msg, "line 4");
}

TEST(CudaSimStrict, ShuffleWithAMissingLaneNamesTheLane) {
  const char *src = R"(
extern "C" __global__ void missing_lane(float *out) {
  float v = threadIdx.x;
  if (threadIdx.x == 5) return;
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}
)";
  DeviceArray<float> out(32);
  float *o = out.data();
  void *args[] = {&o};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "missing_lane"), {1}, {32}, 0, args); });
  EXPECT_CONTAINS(msg, "kernel 'missing_lane' block (0,0,0) thread (0,0,0)");
  EXPECT_CONTAINS(msg, "__shfl_xor_sync on line 5 with mask 0xffffffff: lane 5 (thread (5,0,0))");
  EXPECT_CONTAINS(msg, "has exited");
}

TEST(CudaSimStrict, ShuffleMaskMustHoldTheCallingLaneAndExistingLanes) {
  const char *src = R"(
extern "C" __global__ void bad_masks(float *out, unsigned mask) {
  out[threadIdx.x] = __shfl_down_sync(mask, 1.0f, 1);
}
)";
  DeviceArray<float> out(48);
  float *o = out.data();
  unsigned low_half = 0x0000ffffu, full = 0xffffffffu;
  void *half_args[] = {&o, &low_half};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "bad_masks"), {1}, {32}, 0, half_args); });
  EXPECT_CONTAINS(msg, "is not in its mask 0x0000ffff");
  EXPECT_CONTAINS(msg, "kernel 'bad_masks' block (0,0,0) thread (");
  void *full_args[] = {&o, &full};
  msg = kernel_error_of([&] { launch(kernel_from(src, "bad_masks"), {1}, {48}, 0, full_args); });
  EXPECT_CONTAINS(msg, "names lane 16, which does not exist (the block has 48 threads)");
}

TEST(CudaSimStrict, ShuffleReadingALaneOutsideTheMaskIsAnError) {
  const char *src = R"(
extern "C" __global__ void read_outside(float *out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1.0f, 20);
}
)";
  DeviceArray<float> out(32);
  float *o = out.data();
  void *args[] = {&o};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "read_outside"), {1}, {32}, 0, args); });
  EXPECT_CONTAINS(msg, "kernel 'read_outside' block (0,0,0) thread (0,0,0)");
  EXPECT_CONTAINS(msg, "__shfl_sync on line 4: lane 0 reads lane 20, which is not in the mask 0x0000ffff");
}

TEST(CudaSimStrict, OutOfBoundsGlobalStoreNamesKernelBlockThreadAndAllocation) {
  const char *src = R"(
extern "C" __global__ void off_by_one(float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f;
}
)";
  const int n = 1024;
  DeviceArray<float> out(n, "out");
  float *o = out.data();
  int count = n;
  void *args[] = {&o, &count};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "off_by_one"), {5}, {256}, 0, args); });
  EXPECT_CONTAINS(msg, "kernel 'off_by_one' block (4,0,0) thread (0,0,0)");
  EXPECT_CONTAINS(msg, "invalid store to");
  EXPECT_CONTAINS(msg, "0 bytes past the end of allocation 'out'");
  EXPECT_CONTAINS(msg, "4096 bytes");
  EXPECT_CONTAINS(msg, "in off_by_one");
}

TEST(CudaSimStrict, SimulatorSurvivesAFaultAndRunsTheNextLaunch) {
  const char *src = R"(
extern "C" __global__ void store_at(float *out, int at) { out[at + threadIdx.x] = 2.0f; }
)";
  DeviceArray<float> out(64, "out");
  float *o = out.data();
  int bad = 64, good = 0;
  void *bad_args[] = {&o, &bad}, *good_args[] = {&o, &good};
  HostKernel k = kernel_from(src, "store_at");
  for (int round = 0; round < 3; ++round) {
    EXPECT_CONTAINS(kernel_error_of([&] { launch(k, {1}, {64}, 0, bad_args); }), "past the end of allocation 'out'");
    launch(k, {1}, {64}, 0, good_args);
  }
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], 2.0f);
}

TEST(CudaSimStrict, FaultOutsideAKernelStillCrashesTheProcess) {
  // The simulator's handlers catch faults on its fibers only; any other
  // fault gets the handler that was there before (here: the default).
  HostKernel k = kernel_from("extern \"C\" __global__ void nothing() {}", "nothing");
  ::testing::FLAGS_gtest_death_test_style = "threadsafe"; // the pool's threads do not survive fork()
  launch(k, {1}, {1}, 0, nullptr);                         // installs the handlers
  EXPECT_DEATH(
      {
        void *page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        *static_cast<volatile int *>(page) = 1;
      },
      "");
}

TEST(CudaSimStrict, SharedArrayIndexOutOfBoundsIsCaughtByUbsan) {
  const char *src = R"(
extern "C" __global__ void shared_overrun(float *out) {
  __shared__ float tile[32];
  tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x % 32];
}
)";
  DeviceArray<float> out(33);
  float *o = out.data();
  void *args[] = {&o};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "shared_overrun"), {1}, {33}, 0, args); });
  EXPECT_CONTAINS(msg, "kernel 'shared_overrun' block (0,0,0) thread (32,0,0)");
  EXPECT_CONTAINS(msg, "index 32 out of bounds for type 'float"); // g++: 'float [32]', clang++: 'float[32]'
  EXPECT_CONTAINS(msg, "[32]'");
  EXPECT_CONTAINS(msg, ".cu:4:");
}

TEST(CudaSimStrict, DynamicSharedMemoryOverrunFaults) {
  const char *src = R"(
extern "C" __global__ void smem_overrun(int n) {
  extern __shared__ unsigned char kiln_smem[];
  float *buf = reinterpret_cast<float *>(kiln_smem);
  if (threadIdx.x == 3) buf[n] = 0.0f;
}
)";
  int shift = 64;
  void *args[] = {&shift};
  std::string msg =
      kernel_error_of([&] { launch(kernel_from(src, "smem_overrun"), {1}, {64}, 64 * sizeof(float), args); });
  EXPECT_CONTAINS(msg, "kernel 'smem_overrun' block (0,0,0) thread (3,0,0)");
  EXPECT_CONTAINS(msg, "out-of-bounds store to dynamic shared memory: 256 bytes from its start, the launch gave 256");
}

TEST(CudaSimStrict, DeadlockIsAnErrorNotAHang) {
  const char *src = R"(
extern "C" __global__ void cross_wait(float *out) {
  float v = threadIdx.x;
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    v = __shfl_sync(0xffffffffu, v, 0);
  }
  out[threadIdx.x] = v;
}
)";
  DeviceArray<float> out(32);
  float *o = out.data();
  void *args[] = {&o};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "cross_wait"), {1}, {32}, 0, args); });
  EXPECT_CONTAINS(msg, "kernel 'cross_wait' block (0,0,0) thread (0,0,0): deadlock");
  EXPECT_CONTAINS(msg, "thread (0,0,0) at __syncthreads on line 5");
}

TEST(CudaSimStrict, SpinWaitThatNoThreadReleasesIsReported) {
  const char *src = R"(
extern "C" __global__ void spin_forever(int *flag) {
  while (atomicAdd(flag, 0) == 0) {
  }
}
)";
  SimConfig saved = config(), quick = saved;
  quick.spin_limit = 10000;
  set_config(quick);
  DeviceArray<int> flag(1);
  int *f = flag.data();
  void *args[] = {&f};
  std::string msg = kernel_error_of([&] { launch(kernel_from(src, "spin_forever"), {1}, {4}, 0, args); });
  set_config(saved);
  EXPECT_CONTAINS(msg, "kernel 'spin_forever' block (0,0,0) thread (");
  EXPECT_CONTAINS(msg, "no progress");
}

// Warp-synchronous reduction without __syncwarp: correct only if the 32
// threads run in lockstep (pre-Volta folklore), wrong under random order.
const char *kLockstep = R"(
extern "C" __global__ void warp_reduce(const float *in, float *out, int synchronized) {
  __shared__ float s[64];
  const int t = threadIdx.x;
  s[t] = in[t];
  s[t + 32] = 0.0f;
  __syncthreads();
  for (int offset = 16; offset > 0; offset >>= 1) {
    float other = s[t + offset];
    if (synchronized) __syncthreads();
    s[t] += other;
    if (synchronized) __syncthreads();
  }
  if (t == 0) out[0] = s[0];
}
)";

float warp_reduce(int synchronized) {
  DeviceArray<float> in(32), out(1);
  for (int i = 0; i < 32; ++i) in[i] = float(i + 1);
  float *a = in.data(), *b = out.data();
  void *args[] = {&a, &b, &synchronized};
  launch(kernel_from(kLockstep, "warp_reduce"), {1}, {32}, 0, args);
  return out[0];
}

TEST(CudaSimStrict, LockstepDependentKernelIsWrongUnderRandomOrder) {
  const float sum = 32.0f * 33.0f / 2.0f; // 1 + 2 + ... + 32
  EXPECT_EQ(warp_reduce(1), sum);
  EXPECT_NE(warp_reduce(0), sum) << "the threads must interleave between the steps";
}

TEST(CudaSimStrict, LaunchLimitsNameTheValueAndTheLimit) {
  HostKernel k = kernel_from("extern \"C\" __global__ void empty_kernel() {}", "empty_kernel");
  auto error_of = [&](Dim3 grid, Dim3 block, size_t smem) {
    return kernel_error_of([&] { launch(k, grid, block, smem, nullptr); });
  };
  EXPECT_CONTAINS(error_of({1}, {2048}, 0), "block dimension x = 2048 exceeds the limit 1024");
  EXPECT_CONTAINS(error_of({1}, {64, 32}, 0), "block (64,32,1) has 2048 threads, more than the limit of 1024");
  EXPECT_CONTAINS(error_of({1}, {1, 1, 65}, 0), "block dimension z = 65 exceeds the limit 64");
  EXPECT_CONTAINS(error_of({1, 70000}, {1}, 0), "grid dimension y = 70000 exceeds the limit 65535");
  EXPECT_CONTAINS(error_of({0}, {1}, 0), "grid dimension x is 0");
  EXPECT_CONTAINS(error_of({1}, {1}, 300000), "dynamic shared memory of 300000 bytes");
  EXPECT_CONTAINS(error_of({1}, {1}, 300000), "limit of 232448 bytes");
  EXPECT_CONTAINS(error_of({1}, {2048}, 0), "kernel 'empty_kernel'");
}


// A block all-reduce that reuses its shared scratch without the barrier
// that protects the previous call's readers (the bug of a block reduction
// called twice, as layer_norm's mean and variance): correct when every warp
// moves in step, wrong when one warp runs ahead, as warps do on a GPU. The
// simulator lets a leading warp run ahead between barriers.
const char *kScratchReuse = R"(
__device__ float block_sum(float v, float *scratch, int protect) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (protect) __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < warps; ++w) r += scratch[w];
  return r;
}
extern "C" __global__ void two_sums(const float *in, float *out, int protect) {
  __shared__ float scratch[32];
  const float x = in[threadIdx.x];
  const float mean = block_sum(x, scratch, protect) / blockDim.x;
  const float var = block_sum((x - mean) * (x - mean), scratch, protect);
  out[threadIdx.x] = var;
}
)";

/// The number of threads of `two_sums` (256 threads) that got a wrong variance.
int wrong_variances(int protect) {
  DeviceArray<float> in(256), out(256);
  for (int i = 0; i < 256; ++i) in[i] = float(i % 7);
  float *a = in.data(), *b = out.data();
  void *args[] = {&a, &b, &protect};
  launch(kernel_from(kScratchReuse, "two_sums"), {1}, {256}, 0, args);
  double mean = 0, var = 0;
  for (int i = 0; i < 256; ++i) mean += in[i] / 256.0;
  for (int i = 0; i < 256; ++i) var += (in[i] - mean) * (in[i] - mean);
  int wrong = 0;
  for (int i = 0; i < 256; ++i) wrong += std::abs(out[i] - var) > 1e-3 * var;
  return wrong;
}

TEST(CudaSimStrict, SharedScratchReusedWithoutABarrierIsWrong) {
  EXPECT_EQ(wrong_variances(1), 0);
  const SimConfig saved = config();
  for (uint64_t seed : {1, 2, 3}) {
    SimConfig c = saved;
    c.seed = seed;
    set_config(c);
    EXPECT_GT(wrong_variances(0), 0) << "seed " << seed << ": a warp must run ahead into the second sum";
  }
  set_config(saved);
}

} // namespace
} // namespace kiln::runtime::sim::test
