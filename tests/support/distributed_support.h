// tests/support/distributed_support.h - what the distributed tests
// (tests/frontend/ddp_test.cpp and its neighbours) and kiln-bench-ddp
// (bench/distributed/bench_ddp.cpp) share: a port for MASTER_PORT and the
// measure of how much of DDP's all-reduce the compiled backward hides.
//
//   runtime::Profiler &profiler = runtime::Profiler::instance();
//   profiler.start();
//   loss_fn(ddp->forward(x), y).backward();
//   auto overlap = test_support::measure_allreduce_overlap(profiler, *ddp);
//   profiler.stop_and_write("/dev/null");
//   if (overlap) std::printf("%.0f%% hidden\n", 100 * overlap->hidden_fraction());
//
// Header only; the target links KilnLauncher (kilnrun's choose_free_port)
// and kiln.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "Launcher.h" // kilnrun::choose_free_port
#include "kiln/distributed.h"
#include "kiln/runtime/Profiler.h"

namespace kiln::test_support {

/// A TCP port free a moment ago, for MASTER_PORT (kilnrun's own choice,
/// runtime::distributed::kilnrun::choose_free_port). Throws
/// std::runtime_error when no socket can be bound.
inline uint16_t free_port() { return static_cast<uint16_t>(runtime::distributed::kilnrun::choose_free_port()); }

/// How the last backward's bucket all-reduces lay against its compiled
/// backward (all times in microseconds on the profiler's clock).
struct AllReduceOverlap {
  double backward_us = 0;          ///< the profiled "backward..." step's duration
  double allreduce_us = 0;         ///< sum over the buckets of Work end - start
  double hidden_us = 0;            ///< sum over the buckets of the part before the backward's last kernel ended
  double first_bucket_lead_us = 0; ///< the backward's last kernel end - the first bucket's start (> 0: overlapped)
  size_t buckets = 0;
  /// hidden_us / allreduce_us: the fraction of all-reduce time hidden
  /// behind the backward's kernels (0 without all-reduce time).
  double hidden_fraction() const { return allreduce_us > 0 ? hidden_us / allreduce_us : 0; }
};

/// Measures the last backward of `ddp` from the events `profiler` has
/// recorded since start() (call it before stop_and_write, right after the
/// backward returns): the last "step" event named "backward..." bounds the
/// compiled backward, the last "kernel" event ending inside it is its last
/// kernel, and ddp.last_timings() gives each bucket's all-reduce (steady
/// clock, mapped onto the profiler's clock through now). A bucket's hidden
/// part is the part of [start, end] before that last kernel's end. nullopt
/// when no compiled backward (or no kernel in it) was profiled.
inline std::optional<AllReduceOverlap> measure_allreduce_overlap(const runtime::Profiler &profiler,
                                                                 const distributed::DistributedDataParallel &ddp) {
  const auto now = std::chrono::steady_clock::now();
  const double now_us = profiler.now_us();
  auto us = [&](std::chrono::steady_clock::time_point t) {
    return now_us - std::chrono::duration<double, std::micro>(now - t).count();
  };
  double bwd_start = -1, bwd_end = -1, last_kernel_end = -1;
  const auto events = profiler.events();
  for (const auto &e : events)
    if (e.category == "step" && e.name.rfind("backward", 0) == 0)
      bwd_start = e.start_us, bwd_end = e.start_us + e.duration_us;
  for (const auto &e : events)
    if (e.category == "kernel" && e.start_us >= bwd_start && e.start_us <= bwd_end)
      last_kernel_end = std::max(last_kernel_end, e.start_us + e.duration_us);
  if (bwd_start < 0 || last_kernel_end < 0)
    return std::nullopt;
  AllReduceOverlap o;
  o.backward_us = bwd_end - bwd_start;
  const auto timings = ddp.last_timings();
  o.buckets = timings.size();
  for (const auto &t : timings) {
    const double a = us(t.start), b = us(t.end);
    o.allreduce_us += b - a;
    o.hidden_us += std::max(0.0, std::min(b, last_kernel_end) - a);
  }
  if (!timings.empty())
    o.first_bucket_lead_us = last_kernel_end - us(timings.front().start);
  return o;
}

} // namespace kiln::test_support
