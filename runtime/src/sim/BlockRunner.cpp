// A block's threads as fibers, scheduled in a seeded random order; the
// barrier rule (BlockRunner.h).
#include "BlockRunner.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

namespace kiln::runtime::sim::detail {
namespace {

/// CUDA leaves shared memory uninitialized; 0xFF bytes read as NaN floats
/// and -1 integers, so a kernel that reads before writing gets visibly
/// wrong values.
constexpr int kSharedPoison = 0xFF;
/// One in kAtomicSwitchOdds atomics switches to another thread, so
/// interleavings at atomics vary and spin-waits let the others run.
constexpr uint64_t kAtomicSwitchOdds = 4;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

} // namespace

Dim3 thread_coordinates(uint32_t linear, Dim3 block) {
  return Dim3{linear % block.x, linear / block.x % block.y, linear / (block.x * block.y)};
}

BlockRunner *&BlockRunner::on_this_thread() {
  static thread_local BlockRunner *runner = nullptr;
  return runner;
}

BlockRunner::BlockRunner() {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t arena = (kMaxSharedBytesOptIn + page - 1) / page * page;
  smem_mapping_bytes_ = arena + page;
  void *m = mmap(nullptr, smem_mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  smem_mapping_ = static_cast<char *>(m);
  smem_end_ = smem_mapping_ + arena;
  mprotect(smem_end_, page, PROT_NONE);
}

BlockRunner::~BlockRunner() { munmap(smem_mapping_, smem_mapping_bytes_); }

uint64_t BlockRunner::next_random() {
  rng_ = splitmix64(rng_);
  return rng_;
}

void BlockRunner::start_block(const LaunchSpec &spec, uint64_t block_linear) {
  spec_ = &spec;
  const Dim3 b = spec.block, g = spec.grid;
  const uint32_t n = uint32_t(b.count());
  threads_.resize(n);
  ready_.clear();
  leader_ready_.clear();
  const uint3 block_idx{uint32_t(block_linear % g.x), uint32_t(block_linear / g.x % g.y),
                        uint32_t(block_linear / (uint64_t(g.x) * g.y))};
  for (uint32_t i = 0; i < n; ++i) {
    SimThread &t = threads_[i];
    Dim3 c = thread_coordinates(i, b);
    t.info = KilnSimThreadInfo{uint3{c.x, c.y, c.z}, block_idx, dim3(b.x, b.y, b.z), dim3(g.x, g.y, g.z)};
    t.linear = i;
    t.state = ThreadState::NotStarted;
    t.op = nullptr;
    t.stack = nullptr;
  }
  exited_ = at_barrier_ = 0;
  spins_ = 0;
  failure_.reset();
  // Per block, so a block's order does not depend on which OS thread runs it.
  rng_ = splitmix64(spec.config.seed ^ splitmix64(block_linear));
  choose_leading_warp();
  for (uint32_t i = 0; i < n; ++i) make_ready(threads_[i]);
  for (SimThread &t : threads_) t.state = ThreadState::NotStarted;
  smem_base_ = reinterpret_cast<unsigned char *>(smem_end_) -
               (spec.dynamic_shared_bytes + 15) / 16 * 16;
  poison_shared_memory();
}

void BlockRunner::poison_shared_memory() {
  std::memset(smem_base_, kSharedPoison, (spec_->dynamic_shared_bytes + 15) / 16 * 16);
  const HostModule *module = spec_->kernel.module;
  if (module != tls_module_) {
    // The library's thread-local block exists once this OS thread touched it.
    auto touch = reinterpret_cast<void *(*)()>(dlsym(module->handle(), kTlsTouchSymbol));
    if (touch) touch();
    tls_data_ = nullptr;
    if (dlinfo(module->handle(), RTLD_DI_TLS_DATA, &tls_data_) != 0) tls_data_ = nullptr;
    tls_module_ = module;
  }
  if (tls_data_) std::memset(tls_data_, kSharedPoison, module->static_shared_bytes());
}

std::optional<Failure> BlockRunner::run(const LaunchSpec &spec, uint64_t block_linear, const std::atomic<bool> &stop) {
  start_block(spec, block_linear);
  if (sigsetjmp(fault_landing_, 1) != 0) {
    // Back from the signal handler: the current fiber faulted.
    in_fiber_ = false;
    fiber_landed();
    failure_ = Failure{current_->linear, fault_problem()};
  } else {
    schedule(stop);
  }
  release_stacks();
  return failure_;
}

void BlockRunner::schedule(const std::atomic<bool> &stop) {
  const uint32_t n = uint32_t(threads_.size());
  while (!failure_) {
    if (stop.load(std::memory_order_relaxed)) return;
    std::vector<uint32_t> &from = leader_ready_.empty() ? ready_ : leader_ready_;
    if (from.empty()) {
      if (exited_ != n) failure_ = analyze_blocked();
      return;
    }
    size_t pick = size_t(next_random() % from.size());
    uint32_t index = from[pick];
    from[pick] = from.back();
    from.pop_back();
    resume(threads_[index]);
  }
}

void BlockRunner::resume(SimThread &t) {
  current_ = &t;
  if (t.state == ThreadState::NotStarted) {
    t.stack = stacks_.take();
    fiber_prepare(t.context, *t.stack, &BlockRunner::fiber_main, this);
    t.state = ThreadState::Ready;
    progress();
  }
  in_fiber_ = true;
  fiber_switch(scheduler_, t.context);
  in_fiber_ = false;
  if (t.state == ThreadState::Exited && t.stack) {
    stacks_.give_back(t.stack);
    t.stack = nullptr;
  }
}

void BlockRunner::fiber_main(void *runner) {
  auto *self = static_cast<BlockRunner *>(runner);
  fiber_started(self->scheduler_);
  self->spec_->kernel.entry(self->spec_->args);
  SimThread &t = *self->current_;
  t.state = ThreadState::Exited;
  self->exited_++;
  self->progress();
  self->switch_to_scheduler(/*finished=*/true);
  __builtin_trap(); // an exited fiber is never resumed
}

void BlockRunner::switch_to_scheduler(bool finished) { fiber_switch(current_->context, scheduler_, finished); }

void BlockRunner::make_ready(SimThread &t) {
  t.state = ThreadState::Ready;
  (t.linear / kWarpSize == leading_warp_ ? leader_ready_ : ready_).push_back(t.linear);
}

void BlockRunner::choose_leading_warp() {
  const uint64_t warps = (threads_.size() + kWarpSize - 1) / kWarpSize;
  leading_warp_ = uint32_t(next_random() % warps);
}

void BlockRunner::fail_for(uint32_t thread, std::string problem) {
  if (!failure_) failure_ = Failure{thread, std::move(problem)};
}

void BlockRunner::abandon() {
  switch_to_scheduler(/*finished=*/true); // the scheduler sees failure_ and abandons the block
  __builtin_trap();
}

void BlockRunner::release_stacks() {
  for (SimThread &t : threads_)
    if (t.stack) {
      stacks_.give_back(t.stack);
      t.stack = nullptr;
    }
  ready_.clear();
  leader_ready_.clear();
}

void BlockRunner::atomic_point() {
  if (next_random() % kAtomicSwitchOdds != 0) return;
  if (++spins_ > spec_->config.spin_limit) {
    fail("no progress: " + std::to_string(spec_->config.spin_limit) +
         " switches at atomics without any thread starting, exiting or passing a barrier or warp operation "
         "(a spin-wait on a value no thread writes?)");
    abandon();
  }
  // Not back to the leading warp's list: a spin-wait of the leader on a
  // value another warp writes must let that warp run (GPUs guarantee
  // independent warps progress).
  current_->state = ThreadState::Ready;
  ready_.push_back(current_->linear);
  switch_to_scheduler();
}

// ---- __syncthreads --------------------------------------------------------

void BlockRunner::barrier(int line) {
  SimThread &t = *current_;
  t.state = ThreadState::AtBarrier;
  t.barrier_line = line;
  // A barrier completes when every thread of the block is at one: a thread
  // that exited never arrives, which the blocked analysis reports.
  if (++at_barrier_ == threads_.size() && !release_barrier()) abandon();
  switch_to_scheduler();
}

bool BlockRunner::release_barrier() {
  const int line = threads_[0].barrier_line;
  for (const SimThread &other : threads_)
    if (other.barrier_line != line) {
      fail_for(other.linear, "waits at the __syncthreads on line " + std::to_string(other.barrier_line) +
                                 " while thread " + to_string(thread_coordinates(0, spec_->block)) +
                                 " waits at the one on line " + std::to_string(line) +
                                 " (every thread must reach the same barrier)");
      return false;
    }
  choose_leading_warp(); // nothing is ready now: every thread waits here
  for (SimThread &other : threads_) make_ready(other);
  at_barrier_ = 0;
  progress();
  return true;
}

unsigned BlockRunner::activemask() const {
  const uint32_t base = current_->linear / kWarpSize * kWarpSize;
  unsigned mask = 0;
  for (uint32_t lane = 0; lane < kWarpSize && base + lane < threads_.size(); ++lane)
    if (threads_[base + lane].state != ThreadState::Exited) mask |= 1u << lane;
  return mask;
}

} // namespace kiln::runtime::sim::detail
