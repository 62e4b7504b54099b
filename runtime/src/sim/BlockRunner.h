// One block's run: its threads as fibers on the calling OS thread, the
// barrier and warp-operation rules, the seeded random order, and the
// deadlock analysis (runtime/src/sim/README.md, "strictness"). Not installed.
#pragma once

#include "ApiTable.h"
#include "Fiber.h"
#include "kiln/runtime/sim/Grid.h"

#include <atomic>
#include <csetjmp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime::sim::detail {

/// What one launch shares between its OS threads (read-only while blocks run).
struct LaunchSpec {
  HostKernel kernel;
  Dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
  void **args = nullptr;
  SimConfig config;
};

/// A thread's failure: the thread (linear index in its block) it is charged
/// to and the problem, for KernelError.
struct Failure {
  uint32_t thread = 0;
  std::string problem;
};

enum class ThreadState : uint8_t { NotStarted, Ready, AtBarrier, AtWarpOp, Exited };

struct SimThread {
  KilnSimThreadInfo info{};
  uint32_t linear = 0;
  ThreadState state = ThreadState::NotStarted;
  int barrier_line = 0;
  KilnSimWarpOp *op = nullptr; // lives on the thread's fiber stack while it waits
  FiberContext context;
  FiberStack *stack = nullptr;
};

/// A fault caught on a fiber (Grid.cpp's signal handler fills it).
struct Fault {
  int signal = 0;
  uintptr_t address = 0;
  uintptr_t pc = 0;
  int write = -1; // 1 store, 0 load, -1 unknown
};

/// Runs blocks for one OS thread of the pool; owns that thread's fiber
/// stacks and dynamic shared memory arena.
class BlockRunner {
public:
  BlockRunner();
  ~BlockRunner();
  /// Runs block `block_linear` of `spec`; a failure, or none. Returns early
  /// (no failure) when `stop` becomes true.
  std::optional<Failure> run(const LaunchSpec &spec, uint64_t block_linear, const std::atomic<bool> &stop);

  // The entry-point table's implementations (ApiTable.h), called from fibers.
  const KilnSimThreadInfo *current() const { return &current_->info; }
  void barrier(int line);
  void warp_op(KilnSimWarpOp *op);
  unsigned activemask() const;
  void atomic_point();
  unsigned char *dynamic_smem() const { return smem_base_; }
  /// Records the current thread's failure (the first one of the block
  /// wins). The caller then returns to its API entry, which calls
  /// abandon() with no heap-owning objects left on the fiber's stack: an
  /// abandoned fiber never unwinds, so anything still alive there leaks.
  void fail(std::string problem) { fail_for(current_->linear, std::move(problem)); }
  void fail_for(uint32_t thread, std::string problem);
  bool failed() const { return failure_.has_value(); }
  /// Leaves the current fiber for good; the scheduler abandons the block.
  [[noreturn]] void abandon();

  // For the signal handler.
  bool in_fiber() const { return in_fiber_; }
  sigjmp_buf &fault_landing() { return fault_landing_; }
  Fault &fault() { return fault_; }
  FiberContext &scheduler_context() { return scheduler_; }

  /// The thread-local runner of the calling OS thread (null off the pool).
  static BlockRunner *&on_this_thread();

private:
  static void fiber_main(void *runner);
  void start_block(const LaunchSpec &spec, uint64_t block_linear);
  void schedule(const std::atomic<bool> &stop);
  void resume(SimThread &t);
  void switch_to_scheduler(bool finished = false);
  void make_ready(SimThread &t);
  void choose_leading_warp();
  void progress() { spins_ = 0; }
  uint64_t next_random();
  // These record a failure and return false; their caller abandons.
  bool check_warp_op(const KilnSimWarpOp &op);
  bool try_complete_warp_op(const KilnSimWarpOp &op, uint32_t warp_base);
  bool deliver_shuffle(uint32_t warp_base, unsigned mask);
  bool release_barrier();
  Failure analyze_blocked() const;
  std::optional<Failure> warp_op_blocked(const SimThread &t) const;
  std::string describe_wait(const SimThread &t) const;
  std::string fault_problem() const;
  void poison_shared_memory();
  void release_stacks();

  const LaunchSpec *spec_ = nullptr;
  std::vector<SimThread> threads_;
  // Ready threads: those of the leading warp (run first, so that warp races
  // ahead of the others until it blocks: GPU warps are not in step with each
  // other, and a missing barrier before shared memory is reused shows), and
  // the others. A new leading warp is drawn at block start and at every
  // barrier release.
  std::vector<uint32_t> leader_ready_, ready_;
  uint32_t leading_warp_ = 0;
  SimThread *current_ = nullptr;
  uint32_t exited_ = 0, at_barrier_ = 0;
  uint64_t rng_ = 0, spins_ = 0;
  std::optional<Failure> failure_;
  FiberContext scheduler_;
  StackPool stacks_;
  bool in_fiber_ = false;
  sigjmp_buf fault_landing_;
  Fault fault_;
  // The dynamic shared memory arena: kMaxSharedBytesOptIn bytes followed by
  // a guard page; a block's `dynamic_shared_bytes` end at the guard page.
  char *smem_mapping_ = nullptr;
  size_t smem_mapping_bytes_ = 0;
  char *smem_end_ = nullptr; // where the guard page starts
  unsigned char *smem_base_ = nullptr;
  // The kernel library whose static __shared__ (thread-local) storage was
  // found for this OS thread, and that storage.
  const void *tls_module_ = nullptr;
  void *tls_data_ = nullptr;
};

/// "(x,y,z)" of a thread's linear index in a block of `block` threads.
Dim3 thread_coordinates(uint32_t linear, Dim3 block);

} // namespace kiln::runtime::sim::detail
