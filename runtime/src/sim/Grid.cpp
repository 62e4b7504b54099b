// The grid runner: the OS thread pool, launch limits, the entry-point
// table and KernelError (Grid.h).
#include "kiln/runtime/sim/Grid.h"

#include "BlockRunner.h"
#include "Faults.h"

#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

namespace kiln::runtime::sim {

std::string to_string(const Dim3 &d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

static std::string kernel_error_text(const std::string &kernel, const std::optional<Dim3> &block,
                                     const std::optional<Dim3> &thread, const std::string &problem) {
  std::string text = "cuda-sim: kernel '" + kernel + "'";
  if (block) text += " block " + to_string(*block);
  if (thread) text += " thread " + to_string(*thread);
  return text + ": " + problem;
}

KernelError::KernelError(std::string kernel, std::optional<Dim3> block, std::optional<Dim3> thread,
                         std::string problem)
    : std::runtime_error(kernel_error_text(kernel, block, thread, problem)), kernel_(std::move(kernel)),
      block_(block), thread_(thread), problem_(std::move(problem)) {}

namespace detail {
namespace {

BlockRunner &runner() { return *BlockRunner::on_this_thread(); }

const KilnSimThreadInfo *api_current() { return runner().current(); }
void api_barrier(int line) { runner().barrier(line); }
void api_warp_op(KilnSimWarpOp *op) { runner().warp_op(op); }
unsigned api_activemask() { return runner().activemask(); }
void api_atomic_point() { runner().atomic_point(); }
unsigned char *api_dynamic_smem() { return runner().dynamic_smem(); }
// Both build their message in an inner scope: abandon() never returns, so
// nothing that owns heap memory may be alive on the fiber when it runs.
void api_undefined_behaviour(const char *check, const char *file, unsigned line, unsigned column,
                             const char *detail) {
  {
    std::string problem = std::string("undefined behaviour (UBSan): ") + check;
    if (detail && *detail) problem += ": " + std::string(detail);
    problem += " at " + std::string(file ? file : "?") + ":" + std::to_string(line) + ":" + std::to_string(column);
    runner().fail(std::move(problem));
  }
  runner().abandon();
}
void api_trap(const char *what) {
  runner().fail(std::string(what) + " was called");
  runner().abandon();
}

/// The OS threads that run blocks; one launch at a time.
class Pool {
public:
  explicit Pool(unsigned threads) {
    for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    for (std::thread &t : workers_) t.join();
  }
  unsigned size() const { return unsigned(workers_.size()); }

  /// Runs every block of `spec`; the failure of the lowest failing block.
  std::optional<std::pair<uint64_t, Failure>> run(const LaunchSpec &spec) {
    std::unique_lock<std::mutex> lock(mutex_);
    job_ = &spec;
    next_block_ = 0;
    stop_ = false;
    failure_.reset();
    finished_ = 0;
    generation_++;
    wake_.notify_all();
    done_.wait(lock, [&] { return finished_ == workers_.size(); });
    job_ = nullptr;
    return std::move(failure_);
  }

private:
  void work() {
    AltSignalStack alt_stack;
    BlockRunner runner;
    BlockRunner::on_this_thread() = &runner;
    uint64_t seen = 0;
    for (;;) {
      const LaunchSpec *spec = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return quit_ || generation_ != seen; });
        if (quit_) break;
        seen = generation_;
        spec = job_;
      }
      run_blocks(runner, *spec);
      std::lock_guard<std::mutex> lock(mutex_);
      if (++finished_ == workers_.size()) done_.notify_all();
    }
    BlockRunner::on_this_thread() = nullptr;
  }

  void run_blocks(BlockRunner &runner, const LaunchSpec &spec) {
    const uint64_t total = spec.grid.count();
    for (uint64_t b = next_block_++; b < total && !stop_.load(); b = next_block_++) {
      std::optional<Failure> f = runner.run(spec, b, stop_);
      if (!f) continue;
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failure_ || b < failure_->first) failure_ = std::make_pair(b, *f);
      stop_ = true; // the other OS threads abandon their blocks
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const LaunchSpec *job_ = nullptr;
  uint64_t generation_ = 0;
  size_t finished_ = 0;
  bool quit_ = false;
  std::atomic<uint64_t> next_block_{0};
  std::atomic<bool> stop_{false};
  std::optional<std::pair<uint64_t, Failure>> failure_;
};

uint64_t env_number(const char *name, uint64_t fallback) {
  const char *text = std::getenv(name);
  if (!text || !*text) return fallback;
  char *end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  return end && *end == '\0' ? uint64_t(v) : fallback;
}

struct Simulator {
  std::mutex mutex; // one launch at a time; guards the rest
  SimConfig config;
  std::unique_ptr<Pool> pool;
  Simulator() {
    config.threads = unsigned(env_number("KILN_SIM_THREADS", 0));
    config.seed = env_number("KILN_SIM_SEED", 1);
  }
  Pool &ensure_pool() {
    unsigned want = config.threads ? config.threads : std::max(1u, std::thread::hardware_concurrency());
    if (!pool || pool->size() != want) {
      pool.reset();
      pool = std::make_unique<Pool>(want);
    }
    return *pool;
  }
};

Simulator &simulator() {
  // Never destroyed (kernels may run during static destruction); the
  // workers are joined at exit, so LeakSanitizer's exit scan sees no thread
  // that has switched stacks.
  static Simulator *s = [] {
    auto *made = new Simulator;
    std::atexit([] {
      std::lock_guard<std::mutex> lock(simulator().mutex);
      simulator().pool.reset();
    });
    return made;
  }();
  return *s;
}

[[noreturn]] void bad_launch(const HostKernel &k, const std::string &problem) {
  throw KernelError(k.name, std::nullopt, std::nullopt, problem);
}

void check_extent(const HostKernel &k, const char *what, char axis, uint32_t value, uint32_t limit) {
  if (value == 0) bad_launch(k, std::string(what) + " dimension " + axis + " is 0 (every dimension must be >= 1)");
  if (value > limit)
    bad_launch(k, std::string(what) + " dimension " + axis + " = " + std::to_string(value) + " exceeds the limit " +
                      std::to_string(limit));
}

void check_launch(const HostKernel &k, Dim3 grid, Dim3 block, size_t dynamic_shared_bytes) {
  if (!k.entry || !k.module) bad_launch(k, "the kernel handle is empty (use HostModule::kernel)");
  check_extent(k, "grid", 'x', grid.x, kMaxGridDimX);
  check_extent(k, "grid", 'y', grid.y, kMaxGridDimYZ);
  check_extent(k, "grid", 'z', grid.z, kMaxGridDimYZ);
  check_extent(k, "block", 'x', block.x, kMaxBlockDimXY);
  check_extent(k, "block", 'y', block.y, kMaxBlockDimXY);
  check_extent(k, "block", 'z', block.z, kMaxBlockDimZ);
  if (block.count() > kMaxThreadsPerBlock)
    bad_launch(k, "block " + to_string(block) + " has " + std::to_string(block.count()) +
                      " threads, more than the limit of " + std::to_string(kMaxThreadsPerBlock));
  const size_t static_bytes = k.module->static_shared_bytes();
  if (static_bytes > kMaxStaticSharedBytes)
    bad_launch(k, "the module's static __shared__ memory is " + std::to_string(static_bytes) +
                      " bytes, more than the limit of " + std::to_string(kMaxStaticSharedBytes) + " bytes (48 KiB)");
  if (dynamic_shared_bytes + static_bytes > kMaxSharedBytesOptIn)
    bad_launch(k, "dynamic shared memory of " + std::to_string(dynamic_shared_bytes) + " bytes plus " +
                      std::to_string(static_bytes) + " static bytes exceeds the limit of " +
                      std::to_string(kMaxSharedBytesOptIn) + " bytes (227 KiB per block on sm_90)");
}

} // namespace

const KilnSimApi &runtime_api() {
  static const KilnSimApi api = {&api_current,      &api_barrier,      &api_warp_op,
                                 &api_activemask,   &api_atomic_point, &api_dynamic_smem,
                                 &api_undefined_behaviour, &api_trap};
  return api;
}

} // namespace detail

SimConfig config() {
  detail::Simulator &s = detail::simulator();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.config;
}

void set_config(const SimConfig &config) {
  detail::Simulator &s = detail::simulator();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.config = config;
}

void launch(const HostKernel &kernel, Dim3 grid, Dim3 block, size_t dynamic_shared_bytes, void **args) {
  detail::check_launch(kernel, grid, block, dynamic_shared_bytes);
  detail::Simulator &s = detail::simulator();
  std::lock_guard<std::mutex> lock(s.mutex);
  detail::install_fault_handlers();
  detail::LaunchSpec spec{kernel, grid, block, dynamic_shared_bytes, args, s.config};
  auto failure = s.ensure_pool().run(spec);
  if (!failure) return;
  const uint64_t b = failure->first;
  Dim3 block_idx{uint32_t(b % grid.x), uint32_t(b / grid.x % grid.y), uint32_t(b / (uint64_t(grid.x) * grid.y))};
  throw KernelError(kernel.name, block_idx, detail::thread_coordinates(failure->second.thread, block),
                    failure->second.problem);
}

} // namespace kiln::runtime::sim
