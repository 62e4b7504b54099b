// The simulator's grid runner: a kernel launch as cuLaunchKernel describes
// it, run on the CPU. Blocks are spread over a small pool of OS threads; a
// block's threads are fibers on one OS thread, warps of 32, scheduled in a
// seeded random order; the launch is synchronous.
//
//   sim::HostKernel k = sim::load_module(src)->kernel("scale");
//   float *x = static_cast<float *>(sim::allocate(n * sizeof(float), "x"));
//   void *args[] = {&x, &n};
//   sim::launch(k, {(n + 255) / 256}, {256}, 0, args);
//
// Strictness (runtime/src/sim/README.md has the rules): every thread of a
// block must reach every __syncthreads (same source line) that any thread
// reaches; every lane in a warp operation's mask must take part in the same
// call; all threads blocked is a deadlock; an out-of-bounds access to
// simulator memory, a bad static __shared__ index and other undefined
// behaviour fail the launch. Each failure throws KernelError naming the
// kernel, block and thread.
#pragma once

#include "kiln/runtime/sim/HostModule.h"
#include "kiln/runtime/sim/SimError.h"

#include <cstddef>
#include <cstdint>

namespace kiln::runtime::sim {

/// Launch limits: an H200 (sm_90), as the CUDA programming guide's
/// "Technical Specifications per Compute Capability" table gives them.
inline constexpr uint32_t kMaxThreadsPerBlock = 1024;
inline constexpr uint32_t kMaxBlockDimXY = 1024;
inline constexpr uint32_t kMaxBlockDimZ = 64;
inline constexpr uint32_t kMaxGridDimX = 0x7fffffffu; ///< 2^31 - 1
inline constexpr uint32_t kMaxGridDimYZ = 65535;
/// Static __shared__ per block without an opt-in.
inline constexpr size_t kMaxStaticSharedBytes = 48 * 1024;
/// Static + dynamic shared memory per block with the opt-in
/// (cudaFuncAttributeMaxDynamicSharedMemorySize): 227 KiB on sm_90.
inline constexpr size_t kMaxSharedBytesOptIn = 227 * 1024;
inline constexpr uint32_t kWarpSize = 32;

/// How the simulator runs; read from the environment at first use.
struct SimConfig {
  /// OS threads that run blocks ($KILN_SIM_THREADS; default
  /// std::thread::hardware_concurrency()).
  unsigned threads = 0;
  /// Seed of the thread order ($KILN_SIM_SEED; default 1). The same seed
  /// gives the same order of a block's threads (and of its atomics'
  /// switches); blocks on different OS threads interleave freely.
  uint64_t seed = 1;
  /// A block whose threads switched this many times at atomics without a
  /// thread starting, exiting or passing a barrier or warp operation is
  /// reported as a livelock (a spin-wait no thread releases).
  uint64_t spin_limit = uint64_t(1) << 24;
};
/// The current configuration.
SimConfig config();
/// Replaces the configuration (threads 0: hardware_concurrency). Waits for
/// a launch in flight; the next launch uses the new pool.
void set_config(const SimConfig &config);

/// Runs `kernel` on a grid of `grid` blocks of `block` threads with
/// `dynamic_shared_bytes` of dynamic shared memory per block (the
/// `extern __shared__` arena, poisoned with 0xFF at block start as
/// CUDA leaves it uninitialized). `args` follows cuLaunchKernel: args[i]
/// points at the value of parameter i. Returns when every block finished.
/// Throws KernelError for a configuration beyond the limits above (naming
/// the value and the limit) or for the first failure of a thread.
/// Launches from several host threads run one at a time.
void launch(const HostKernel &kernel, Dim3 grid, Dim3 block, size_t dynamic_shared_bytes, void **args);

} // namespace kiln::runtime::sim
