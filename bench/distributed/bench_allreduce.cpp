// kiln-bench-allreduce: all-reduce bandwidth through Kiln's Gloo process
// group (runtime/distributed: the communication thread, Work, tags) against
// raw gloo::allreduce on a context of its own, in the same run, two ranks as
// threads over loopback TCP. Prints JSON: per size, seconds per call (median
// and minimum of the repetitions on rank 0) and the bus bandwidth
// 2(n-1)/n * bytes / s (NCCL's busbw convention), the ratio kiln / raw of the
// medians (goal >= 0.9), where Kiln's extra time goes (its stages), and how
// long this process's threads stood runnable but without a CPU.
//
//   kiln-bench-allreduce [--reps N] > bench/results/allreduce.json
//   chrt -f 10 kiln-bench-allreduce ...   # other processes cannot delay it
//
// Why the calls are interleaved: on a shared 2-core VM another process holds
// a CPU most of the time, and a woken Gloo thread (the tcp device's loop
// thread, or the thread waiting in waitRecv) then waits for the next 4 ms
// scheduler tick (CONFIG_HZ=250). A call of 0.3 ms then takes 0.3 or ~4 ms,
// and a median over a block of calls flips between the two with the load of
// that second. Timing all raw calls, then all Kiln calls (the first version
// of this benchmark), credited that load to one side: 0.2-0.34 at 1 MiB,
// 6.06 at 256 KiB. Here each repetition makes one raw and one Kiln call, in
// alternating order (ABBA), so both sides sample the same load.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <sched.h>

#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include "kiln/runtime/distributed/ProcessGroup.h"

using namespace kiln::runtime;
using namespace kiln::runtime::distributed;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRanks = 2;
constexpr int kWarmup = 3;
/// Each sum doubles the values; refilling (untimed) keeps them finite.
constexpr int kRefillEvery = 32;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double minimum(const std::vector<double> &v) { return *std::min_element(v.begin(), v.end()); }

/// Seconds this process's threads have spent runnable but not running
/// (the second field of /proc/self/task/*/schedstat, in ns), summed over
/// threads: how much of a measurement other processes took.
double run_queue_wait_s() {
  double total_ns = 0;
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return 0;
  while (const dirent *e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/schedstat");
    double on_cpu_ns = 0, waiting_ns = 0;
    if (f >> on_cpu_ns >> waiting_ns) total_ns += waiting_ns;
  }
  closedir(dir);
  return total_ns / 1e9;
}

const char *scheduling_policy() {
  switch (sched_getscheduler(0)) {
  case SCHED_FIFO: return "SCHED_FIFO";
  case SCHED_RR: return "SCHED_RR";
  default: return "SCHED_OTHER";
  }
}

void raw_allreduce(const std::shared_ptr<gloo::rendezvous::Context> &context, float *p, size_t n) {
  gloo::AllreduceOptions o(context);
  o.setOutput(p, n);
  o.setReduceFunction([](void *c, const void *a, const void *b, size_t m) {
    auto *x = static_cast<float *>(c);
    const auto *u = static_cast<const float *>(a), *v = static_cast<const float *>(b);
    for (size_t i = 0; i < m; ++i) x[i] = u[i] + v[i];
  });
  o.setTag(1000); // one call at a time per context: one tag serves
  gloo::allreduce(o);
}

/// One rank's timings at one size (seconds per call).
struct RankTimes {
  std::vector<double> raw, kiln;
  // Kiln's call in stages: allreduce() returning, the communication thread
  // picking the collective up, Gloo running it, the caller waking from wait().
  std::vector<double> enqueue, to_start, run, to_wakeup;
};

/// Times `reps` raw and `reps` Kiln calls of `n` floats on one rank. Both
/// sides use buffers of the same values, warmed up alike; Kiln's is a
/// Buffer it owns, as DDP's buckets are (no copies in the timed call).
RankTimes time_rank(size_t n, int reps, const std::shared_ptr<gloo::rendezvous::Context> &context,
                    ProcessGroup &group) {
  std::vector<float> raw_data(n);
  auto kiln_buffer = Buffer::make(n * sizeof(float));
  auto *kiln_data = static_cast<float *>(kiln_buffer->data());
  const TensorView view{kiln_buffer, 0, {static_cast<int64_t>(n)}, {1}, kiln::DType::Float32};
  RankTimes t;
  auto time_raw = [&](bool keep) {
    const auto t0 = Clock::now();
    raw_allreduce(context, raw_data.data(), n);
    if (keep) t.raw.push_back(seconds(Clock::now() - t0));
  };
  auto time_kiln = [&](bool keep) {
    const auto t0 = Clock::now();
    auto work = group.allreduce(view, ReduceOp::Sum);
    const auto t1 = Clock::now();
    work->wait();
    const auto t2 = Clock::now();
    if (!keep) return;
    t.kiln.push_back(seconds(t2 - t0));
    t.enqueue.push_back(seconds(t1 - t0));
    t.to_start.push_back(seconds(work->start_time() - t1));
    t.run.push_back(seconds(work->end_time() - work->start_time()));
    t.to_wakeup.push_back(seconds(t2 - work->end_time()));
  };
  for (int i = -kWarmup; i < reps; ++i) {
    if ((i + kWarmup) % kRefillEvery == 0) {
      std::fill(raw_data.begin(), raw_data.end(), 1.0f);
      std::fill(kiln_data, kiln_data + n, 1.0f);
    }
    const bool keep = i >= 0;
    if (i % 2 == 0) {
      time_raw(keep);
      time_kiln(keep);
    } else {
      time_kiln(keep);
      time_raw(keep);
    }
  }
  return t;
}

void print_size(size_t n, const RankTimes &t, double waited_s, int reps, bool last) {
  const double bytes = static_cast<double>(n * sizeof(float)), bus = 2.0 * (kRanks - 1) / kRanks * bytes;
  const double raw = median(t.raw), kiln = median(t.kiln);
  std::printf("    {\"bytes\": %.0f, \"raw_gloo_s\": %.6g, \"kiln_s\": %.6g, \"raw_min_s\": %.6g, \"kiln_min_s\": %.6g,\n"
              "     \"raw_busbw_GBps\": %.3f, \"kiln_busbw_GBps\": %.3f, \"kiln_over_raw_bandwidth\": %.3f,\n"
              "     \"kiln_stages_median_us\": {\"enqueue\": %.1f, \"to_comm_thread\": %.1f, \"gloo\": %.1f, "
              "\"to_waiter\": %.1f},\n"
              "     \"run_queue_wait_per_call_s\": %.6g}%s\n",
              bytes, raw, kiln, minimum(t.raw), minimum(t.kiln), bus / raw / 1e9, bus / kiln / 1e9, raw / kiln,
              median(t.enqueue) * 1e6, median(t.to_start) * 1e6, median(t.run) * 1e6, median(t.to_wakeup) * 1e6,
              waited_s / (2.0 * (reps + kWarmup)), last ? "" : ",");
}

} // namespace

int main(int argc, char **argv) {
  int reps = 30;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(3, std::atoi(argv[i + 1]));
  const std::vector<size_t> sizes{size_t{1} << 16, size_t{1} << 18, size_t{1} << 20, size_t{1} << 22}; // floats
  // Kiln: one group per rank for the whole run.
  auto kiln_store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<ProcessGroup>> groups(kRanks);
  {
    std::vector<std::thread> ts;
    for (int r = 0; r < kRanks; ++r) ts.emplace_back([&, r] { groups[r] = make_gloo_process_group(kiln_store, r, kRanks); });
    for (auto &t : ts) t.join();
  }
  // Raw Gloo: a context per rank on Gloo's own HashStore.
  gloo::rendezvous::HashStore raw_store;
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(kRanks);
  {
    std::vector<std::thread> ts;
    for (int r = 0; r < kRanks; ++r)
      ts.emplace_back([&, r] {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        attr.ai_family = AF_INET;
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        contexts[r] = std::make_shared<gloo::rendezvous::Context>(r, kRanks);
        contexts[r]->connectFullMesh(raw_store, dev);
      });
    for (auto &t : ts) t.join();
  }
  std::printf("{\n  \"benchmark\": \"allreduce\", \"ranks\": %d, \"transport\": \"gloo tcp loopback\", \"reps\": %d,\n"
              "  \"order\": \"raw and kiln interleaved, alternating first\", \"scheduling\": \"%s\",\n"
              "  \"sizes\": [\n",
              kRanks, reps, scheduling_policy());
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<RankTimes> times(kRanks);
    const double waited0 = run_queue_wait_s();
    std::vector<std::thread> ts;
    for (int r = 0; r < kRanks; ++r)
      ts.emplace_back([&, r] { times[r] = time_rank(sizes[k], reps, contexts[r], *groups[r]); });
    for (auto &t : ts) t.join();
    print_size(sizes[k], times[0], run_queue_wait_s() - waited0, reps, k + 1 == sizes.size());
  }
  std::printf("  ]\n}\n");
  return 0;
}
