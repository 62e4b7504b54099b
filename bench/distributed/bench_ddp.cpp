// kiln-bench-ddp: DistributedDataParallel's step time on 2 ranks against 1
// rank with the same per-rank batch (weak scaling: ideal ratio 1.0), and
// the fraction of all-reduce time hidden behind the compiled backward (the
// part of each bucket's all-reduce that ran before the backward's last
// kernel ended, from the profiler's kernel events and Work timestamps:
// test_support::measure_allreduce_overlap, the measure the overlap test
// prints).
// The model: six 512x512 Linear+ReLU layers, compiled, per-rank batch 128,
// SGD. Every rank runs with OMP_NUM_THREADS=1, so 2 ranks use the 2 cores a
// CI machine has and 1 rank uses one.
//
//   kiln-bench-ddp [--steps N] [--out PATH]   (default 20, bench/results/ddp.json)
//
// Ranks are this program re-run with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
// (kilnrun's environment); rank 0 writes its numbers to a file the parent
// reads.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "distributed_support.h" // tests/support: free_port, measure_allreduce_overlap
#include "kiln/kiln.h"
#include "kiln/runtime/Profiler.h"

using namespace kiln;
namespace dist = kiln::distributed;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kWidth = 512, kRows = 128, kLayers = 6;

struct RankResult {
  double step_s = 0;          // median step time
  double hidden_fraction = 0; // all-reduce time before the backward's last kernel end / all-reduce time
  double allreduce_s = 0;     // median all-reduce time per step (sum over buckets)
  size_t buckets = 0;         // the bucket plan's size (after the rebuild)
};

RankResult run_rank(int steps) {
  dist::init_process_group();
  const int rank = dist::get_rank();
  manual_seed(11);
  auto model = std::make_shared<nn::Sequential>();
  for (int l = 0; l < kLayers; ++l) {
    model->push_back(std::make_shared<nn::Linear>(kWidth, kWidth));
    model->push_back(std::make_shared<nn::ReLU>());
  }
  auto ddp = std::make_shared<dist::DistributedDataParallel>(kiln::compile(model));
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(1e-3));
  runtime::Profiler &profiler = runtime::Profiler::instance();
  std::vector<double> times, hidden, comm;
  manual_seed(100 + static_cast<uint64_t>(rank));
  Tensor x = randn({kRows, kWidth}), y = randn({kRows, kWidth});
  for (int s = 0; s < steps + 4; ++s) {
    const bool measured = s >= 4;
    if (measured) profiler.start();
    const auto t0 = Clock::now();
    opt.zero_grad();
    nn::functional::mse_loss(ddp->forward(x), y).backward();
    opt.step();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!measured) continue;
    times.push_back(dt);
    const auto overlap = test_support::measure_allreduce_overlap(profiler, *ddp);
    profiler.stop_and_write("/dev/null");
    if (!overlap) throw Error("kiln-bench-ddp: no compiled backward in the profile of step " + std::to_string(s));
    if (dist::get_world_size() > 1) {
      hidden.push_back(overlap->hidden_fraction());
      comm.push_back(overlap->allreduce_us * 1e-6);
    }
    if (rank == 0 && (s - 4) % 5 == 0)
      std::printf("world %d step %d: %.2f ms (backward %.2f ms), all-reduce %.2f ms, %.0f%% hidden\n",
                  dist::get_world_size(), s - 4, dt * 1e3, overlap->backward_us * 1e-3, overlap->allreduce_us * 1e-3,
                  100 * overlap->hidden_fraction());
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  RankResult r{median(times), median(hidden), median(comm), ddp->bucket_indices().size()};
  dist::destroy_process_group();
  return r;
}

/// Runs `world` ranks of this program; rank 0's numbers.
RankResult run_world(int world, int steps, const std::string &self) {
  const std::string port = std::to_string(test_support::free_port());
  const std::string out = "/tmp/kiln-bench-ddp-" + std::to_string(::getpid()) + "-" + std::to_string(world);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      ::setenv("KILN_BENCH_DDP_OUT", out.c_str(), 1);
      const std::string s = std::to_string(steps);
      ::execl(self.c_str(), self.c_str(), "--steps", s.c_str(), static_cast<char *>(nullptr));
      ::_exit(97);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw Error("a rank of the " + std::to_string(world) + "-rank run failed");
  }
  RankResult r;
  std::ifstream in(out);
  if (!(in >> r.step_s >> r.hidden_fraction >> r.allreduce_s >> r.buckets)) throw Error("no result from rank 0 in " + out);
  std::remove(out.c_str());
  return r;
}

} // namespace

int main(int argc, char **argv) {
  int steps = 20;
  std::string out_path = "bench/results/ddp.json";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else return std::fprintf(stderr, "usage: kiln-bench-ddp [--steps N] [--out PATH]\n"), 2;
  }
  if (steps < 1) return std::fprintf(stderr, "kiln-bench-ddp: --steps must be >= 1\n"), 2;
  try {
    if (const char *child_out = std::getenv("KILN_BENCH_DDP_OUT")) {
      RankResult r = run_rank(steps);
      if (std::getenv("RANK") && std::string(std::getenv("RANK")) == "0") { // the group is destroyed by now
        std::ofstream f(child_out);
        f << r.step_s << " " << r.hidden_fraction << " " << r.allreduce_s << " " << r.buckets << "\n";
      }
      return 0;
    }
    const std::string self = "/proc/self/exe";
    char path[4096];
    const ssize_t n = ::readlink(self.c_str(), path, sizeof path - 1);
    if (n <= 0) throw Error("cannot find its own executable");
    path[n] = 0;
    const RankResult one = run_world(1, steps, path), two = run_world(2, steps, path);
    std::FILE *f = std::fopen(out_path.c_str(), "w");
    if (!f) throw Error("cannot write " + out_path);
    std::fprintf(f,
                 "{\n  \"benchmark\": \"ddp_step\", \"model\": \"6x Linear(512,512)+ReLU, compiled\", \"per_rank_batch\": %lld,\n"
                 "  \"steps\": %d, \"transport\": \"gloo tcp loopback\", \"omp_threads_per_rank\": 1,\n"
                 "  \"step_s_1_rank\": %.6f, \"step_s_2_ranks\": %.6f, \"two_over_one_step_time\": %.3f,\n"
                 "  \"allreduce_s_per_step_2_ranks\": %.6f, \"buckets\": %zu, \"hidden_fraction_2_ranks\": %.3f\n}\n",
                 static_cast<long long>(kRows), steps, one.step_s, two.step_s, two.step_s / one.step_s, two.allreduce_s,
                 two.buckets, two.hidden_fraction);
    std::fclose(f);
    std::printf("1 rank %.2f ms/step, 2 ranks %.2f ms/step (ratio %.2f); all-reduce %.2f ms/step in %zu buckets, "
                "%.0f%% hidden behind the compiled backward; wrote %s\n",
                one.step_s * 1e3, two.step_s * 1e3, two.step_s / one.step_s, two.allreduce_s * 1e3, two.buckets,
                100 * two.hidden_fraction, out_path.c_str());
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-bench-ddp: error: %s\n", e.what());
    return 1;
  }
}
