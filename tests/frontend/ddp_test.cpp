// DistributedDataParallel across real processes on loopback (the harness:
// distributed_ranks.h): 20 steps on 2 and 3 ranks equal one process on the
// global batch (eager, compiled, with rematerialization, with dropout, with
// no_sync accumulation, with unused parameters); the compiled backward
// overlaps the first bucket's all-reduce; a different model, a rank that
// exits and a rank that hangs are errors on every other rank, also as a real
// job under kilnrun, which names the failed rank and leaves no process behind.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "distributed_ranks.h"
#include "distributed_support.h"
#include "kiln/runtime/Profiler.h"
#include "kiln/runtime/distributed/Store.h" // HashStore

namespace kiln::distributed_test {
namespace {

/// Dropout under DDP: each rank seeds its generator per step and rank, and
/// the single process replays the same seeds shard by shard (the mean of
/// the shards' losses is the global batch's loss), so both draw the same
/// masks. `compile_options`: both sides compiled with them.
int dropout_equal(int rank, int world, const CompileOptions *compile_options) {
  auto make = [] {
    manual_seed(7);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(kIn, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.25),
        std::make_shared<nn::Linear>(16, kOut)});
  };
  auto model = make(), reference = make();
  std::shared_ptr<nn::Module> wrapped = model, ref_wrapped = reference;
  if (compile_options) {
    wrapped = kiln::compile(model, *compile_options);
    ref_wrapped = kiln::compile(reference, *compile_options);
  }
  auto ddp = std::make_shared<dist::DistributedDataParallel>(wrapped);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  auto seed = [](int s, int r) { return static_cast<uint64_t>(5000 + 10 * s + r); };
  for (int s = 0; s < 20; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    ref_opt.zero_grad();
    manual_seed(seed(s, rank));
    nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world)), rows_of(y, rank, world)).backward();
    Tensor total;
    for (int r = 0; r < world; ++r) {
      manual_seed(seed(s, r));
      Tensor l =
          nn::functional::mse_loss(ref_wrapped->forward(rows_of(x, r, world)), rows_of(y, r, world)) * (1.0 / world);
      total = total.defined() ? total + l : l;
    }
    total.backward();
    opt.step();
    ref_opt.step();
  }
  const double diff = max_rel_diff(*model, *reference);
  if (diff > 1e-5)
    return std::fprintf(stderr, "rank %d: dropout run differs by %g\n", rank, diff), 1;
  return 0;
}

/// Overlap in the compiled backward: six 512x512 layers (1 MiB of float32
/// weight each, so the 1 MiB first bucket holds the last layer's gradients,
/// which the compiled backward produces first). On steps 4..8 (after the
/// bucket rebuild) the profiler records the compiled backward's kernels;
/// the first bucket's all-reduce must start before the backward's last
/// kernel ends on some step (the comm thread may lose the race on a
/// loaded machine, not on all five). Prints the fraction of all-reduce
/// time that ran before that end (test_support::measure_allreduce_overlap,
/// which kiln-bench-ddp reports too).
int compiled_overlap(int rank, int world) {
  constexpr int64_t kWidth = 512, kRows = 128;
  manual_seed(11);
  auto model = std::make_shared<nn::Sequential>();
  for (int l = 0; l < 6; ++l) {
    model->push_back(std::make_shared<nn::Linear>(kWidth, kWidth));
    model->push_back(std::make_shared<nn::ReLU>());
  }
  auto ddp = std::make_shared<dist::DistributedDataParallel>(kiln::compile(model));
  runtime::Profiler &profiler = runtime::Profiler::instance();
  bool overlapped = false;
  for (int s = 0; s < 9; ++s) {
    manual_seed(static_cast<uint64_t>(100 + s));
    Tensor x = randn({kRows * world, kWidth}), y = randn({kRows * world, kWidth});
    ddp->zero_grad();
    if (s >= 4)
      profiler.start();
    nn::functional::mse_loss(ddp->forward(x.narrow(0, rank * kRows, kRows).contiguous()),
                             y.narrow(0, rank * kRows, kRows).contiguous())
        .backward();
    if (s < 4)
      continue;
    const auto overlap = test_support::measure_allreduce_overlap(profiler, *ddp);
    std::string error;
    profiler.stop_and_write("/dev/null", &error);
    if (!overlap)
      return std::fprintf(stderr, "rank %d: no compiled backward profiled\n", rank), 2;
    if (overlap->buckets < 2)
      return std::fprintf(stderr, "rank %d: %zu buckets, expected several\n", rank, overlap->buckets), 3;
    std::fprintf(stderr,
                 "rank %d step %d: backward %.0f us, first bucket's all-reduce starts %.0f us before its last kernel "
                 "ends; %.0f%% of %zu buckets' all-reduce time before that end\n",
                 rank, s, overlap->backward_us, overlap->first_bucket_lead_us, 100 * overlap->hidden_fraction(),
                 overlap->buckets);
    overlapped |= overlap->first_bucket_lead_us > 0;
  }
  return overlapped ? 0 : 4;
}

int mismatched_model(int rank, int /*world*/) {
  try {
    dist::DistributedDataParallel ddp(make_model(rank == 1 ? 17 : 16));
    return 1;
  } catch (const Error &e) {
    const std::string what = e.what();
    return what.find("parameter 0 differs across ranks: rank 0 has '0.weight' [16, 8] float32, rank 1 has "
                     "'0.weight' [17, 8] float32") != std::string::npos
               ? 0
               : (std::fprintf(stderr, "%s\n", e.what()), 3);
  }
}

/// Rank 1 exits (or hangs) before step 3; rank 0 must fail with kiln::Error
/// within the group's timeout (2 s) plus 5 s: 0 when it does.
int exit_or_hang(bool hang, int rank, int world) {
  using clock = std::chrono::steady_clock;
  auto ddp = std::make_shared<dist::DistributedDataParallel>(make_model());
  for (int s = 0;; ++s) {
    if (rank == 1 && s == 3) {
      if (!hang)
        ::_exit(7);
      std::this_thread::sleep_for(3600s);
    }
    auto [x, y] = batch(s);
    const auto t0 = clock::now();
    try {
      nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world)), rows_of(y, rank, world)).backward();
    } catch (const Error &e) {
      const double waited = std::chrono::duration<double>(clock::now() - t0).count();
      std::fprintf(stderr, "rank %d failed after %.2f s: %s\n", rank, waited, e.what());
      return waited < 2.0 + 5.0 ? 0 : 4; // KILN_DISTRIBUTED_TIMEOUT_S=2 plus 5 s
    }
    if (s > 5)
      return 5;
  }
}

// ---- a real job under kilnrun whose last rank fails mid-step ---------------------

/// Exit codes of a surviving rank in a kilnrun fault case.
constexpr int kFailedInTime = 3, kFailedLate = 4, kNoFailure = 5;

/// Set by SIGTERM on a surviving rank. kilnrun SIGTERMs the others as soon as
/// one worker fails; a survivor keeps going until its own collective fails
/// (as a job that checkpoints on SIGTERM would), so the test sees its
/// kiln::Error. kilnrun's grace period (10 s) is longer than the deadline.
volatile std::sig_atomic_t got_sigterm = 0;

/// Rank world-1 fails at step 3 after its forward, before its backward (so
/// the others wait in the backward's all-reduce): "exit" _exit(7)s, "kill"
/// SIGKILLs itself (as the OOM killer would), "hang" sleeps until kilnrun
/// stops it. Every other rank must fail with kiln::Error within
/// KILN_DISTRIBUTED_TIMEOUT_S + 5 s: it prints the time and returns
/// kFailedInTime (or kFailedLate). Each rank writes its pid to
/// $KILN_DDP_TEST_PID_DIR/pid.RANK first.
int fails_under_kilnrun(const std::string &fault, int rank, int world) {
  using clock = std::chrono::steady_clock;
  const bool faulty = rank == world - 1;
  if (!faulty)
    std::signal(SIGTERM, [](int) { got_sigterm = 1; });
  if (const char *dir = std::getenv("KILN_DDP_TEST_PID_DIR"))
    std::ofstream(std::string(dir) + "/pid." + std::to_string(rank)) << ::getpid() << "\n";
  const double deadline_s = std::atof(std::getenv("KILN_DISTRIBUTED_TIMEOUT_S")) + 5.0;
  auto ddp = std::make_shared<dist::DistributedDataParallel>(make_model());
  for (int s = 0; s < 6; ++s) {
    auto [x, y] = batch(s);
    const auto t0 = clock::now();
    try {
      Tensor loss = nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world)), rows_of(y, rank, world));
      if (faulty && s == 3) {
        if (fault == "exit")
          ::_exit(7);
        if (fault == "kill")
          ::raise(SIGKILL);
        for (;;)
          ::pause(); // "hang": until kilnrun's SIGTERM
      }
      loss.backward();
    } catch (const Error &e) {
      const double waited = std::chrono::duration<double>(clock::now() - t0).count();
      std::fprintf(stderr, "rank %d failed with kiln::Error after %.2f s (deadline %.0f s)%s: %s\n", rank, waited,
                   deadline_s, got_sigterm ? ", SIGTERM received" : "", e.what());
      return waited <= deadline_s ? kFailedInTime : kFailedLate;
    }
  }
  return kNoFailure;
}

const bool registered = register_rank_cases({
    {"equal", [](int rank, int world) { return ddp_train_and_compare(rank, world, false, {}, {}); }},
    {"small_buckets",
     [](int rank, int world) {
       dist::DDPOptions o;
       o.first_bucket_cap_mb = o.bucket_cap_mb = 0.0001; // one bucket per parameter: order and launch rules
       o.gradient_as_bucket_view = true;
       return ddp_train_and_compare(rank, world, false, o, {});
     }},
    {"no_sync", [](int rank, int world) { return ddp_train_and_compare(rank, world, true, {}, {}); }},
    {"unused", [](int rank, int world) { return ddp_unused_head(rank, world, {}); }},
    {"bf16", [](int rank, int world) { return ddp_bf16_hook(rank, world, {}); }},
    {"compiled",
     [](int rank, int world) {
       CompileOptions o;
       return ddp_train_and_compare(rank, world, false, {}, {kCPU, 1e-5, &o});
     }},
    {"compiled_remat",
     [](int rank, int world) {
       CompileOptions o;
       o.memory_budget = 0.5;
       return ddp_train_and_compare(rank, world, false, {}, {kCPU, 1e-5, &o});
     }},
    {"dropout", [](int rank, int world) { return dropout_equal(rank, world, nullptr); }},
    {"dropout_compiled_remat",
     [](int rank, int world) {
       CompileOptions o;
       o.memory_budget = 0.5;
       return dropout_equal(rank, world, &o);
     }},
    {"compiled_overlap", compiled_overlap},
    {"mismatch", mismatched_model},
    {"exit", [](int rank, int world) { return exit_or_hang(false, rank, world); }},
    {"hang", [](int rank, int world) { return exit_or_hang(true, rank, world); }},
    {"kilnrun_exit", [](int rank, int world) { return fails_under_kilnrun("exit", rank, world); }},
    {"kilnrun_kill", [](int rank, int world) { return fails_under_kilnrun("kill", rank, world); }},
    {"kilnrun_hang", [](int rank, int world) { return fails_under_kilnrun("hang", rank, world); }},
});

TEST(DistributedDataParallel, TwentyStepsOnTwoAndThreeRanksEqualOneProcessOnTheGlobalBatch) {
  for (int world : {2, 3})
    EXPECT_EQ(run_ranks("equal", world), std::vector<int>(world, 0)) << world << " ranks";
}

TEST(DistributedDataParallel, OneBucketPerParameterWithGradientsAsBucketViews) {
  EXPECT_EQ(run_ranks("small_buckets", 2), std::vector<int>(2, 0));
}

TEST(DistributedDataParallel, CompiledAndCompiledWithHalfTheMemoryBudgetEqualOneProcess) {
  for (int world : {2, 3}) {
    EXPECT_EQ(run_ranks("compiled", world), std::vector<int>(world, 0)) << world << " ranks";
    EXPECT_EQ(run_ranks("compiled_remat", world), std::vector<int>(world, 0)) << world << " ranks";
  }
}

TEST(DistributedDataParallel, DropoutEagerAndCompiledWithHalfTheMemoryBudgetEqualOneProcess) {
  for (int world : {2, 3}) {
    EXPECT_EQ(run_ranks("dropout", world), std::vector<int>(world, 0)) << world << " ranks";
    EXPECT_EQ(run_ranks("dropout_compiled_remat", world), std::vector<int>(world, 0)) << world << " ranks";
  }
}

/// The first bucket's all-reduce starts inside the compiled backward (from
/// the gradients it announces as its launches finish), before the
/// backward's last kernel ends (profiler timestamps vs Work::start_time).
TEST(DistributedDataParallel, CompiledBackwardOverlapsTheFirstBucketsAllReduce) {
  EXPECT_EQ(run_ranks("compiled_overlap", 2, 120s), std::vector<int>(2, 0));
}

TEST(DistributedDataParallel, FindUnusedParametersAndTheBf16CompressionHook) {
  EXPECT_EQ(run_ranks("unused", 2), std::vector<int>(2, 0));
  EXPECT_EQ(run_ranks("bf16", 2), std::vector<int>(2, 0));
}

TEST(DistributedDataParallel, NoSyncAccumulationEqualsTheLargeBatch) {
  EXPECT_EQ(run_ranks("no_sync", 2), std::vector<int>(2, 0));
}

TEST(DistributedDataParallel, ADifferentModelOnOneRankIsAnErrorOnEveryRank) {
  EXPECT_EQ(run_ranks("mismatch", 2), std::vector<int>(2, 0));
}

TEST(DistributedDataParallel, ARankThatExitsOrHangsFailsTheOtherWithinTheTimeout) {
  auto exited = run_ranks("exit", 2, 30s);
  EXPECT_EQ(exited[0], 0);
  EXPECT_EQ(exited[1], 7);
  auto hung = run_ranks("hang", 2, 20s);
  EXPECT_EQ(hung[0], 0);        // failed with kiln::Error within 2 + 5 s
  EXPECT_EQ(hung[1], -SIGKILL); // the hanging rank, killed by the test after its limit
}

/// The bucket plan on a one-rank group (no peers needed): six 512x512
/// Linear layers (1 MiB + 2 KiB of float32 gradients each, 6 MiB in all).
/// The first bucket closes at its 1 MiB cap (the last layer); the others at
/// a quarter of all the bytes (1.5 MiB: two layers each), so the bucket
/// launched last holds only the first layer, not the 5 MiB that the 25 MiB
/// cap alone would leave there. A smaller bucket_cap_mb still rules.
TEST(DistributedDataParallel, BucketsAfterTheFirstHoldAtMostAQuarterOfTheGradientBytes) {
  auto six_layers = [] {
    manual_seed(11);
    auto model = std::make_shared<nn::Sequential>();
    for (int l = 0; l < 6; ++l)
      model->push_back(std::make_shared<nn::Linear>(512, 512));
    return model;
  };
  using Plan = std::vector<std::vector<size_t>>; // parameter indices: layer l's weight 2l, bias 2l + 1
  dist::init_process_group(std::make_shared<runtime::distributed::HashStore>(), 0, 1);
  EXPECT_EQ(dist::DistributedDataParallel(six_layers()).bucket_indices(),
            (Plan{{11, 10}, {9, 8, 7, 6}, {5, 4, 3, 2}, {1, 0}}));
  dist::DDPOptions small;
  small.bucket_cap_mb = 0.5; // below the quarter: one layer per bucket
  EXPECT_EQ(dist::DistributedDataParallel(six_layers(), small).bucket_indices(),
            (Plan{{11, 10}, {9, 8}, {7, 6}, {5, 4}, {3, 2}, {1, 0}}));
  // A model smaller than the first bucket's cap: one bucket.
  EXPECT_EQ(dist::DistributedDataParallel(make_model()).bucket_indices(), (Plan{{3, 2, 1, 0}}));
  dist::destroy_process_group();
}

/// What a kilnrun job printed and how it ended.
struct KilnrunJob {
  int code = -1;            ///< kilnrun's exit code (-1: killed by the test's hard limit)
  std::string out, err;     ///< its stdout and stderr
  std::vector<pid_t> ranks; ///< the pids the ranks wrote, by rank (0: none written)
};

std::string read_text(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// True when neither `pid` nor any process of its process group (kilnrun
/// makes each worker a group leader) is alive within `limit`.
bool gone_with_its_group(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const bool pid_gone = ::kill(pid, 0) != 0 && errno == ESRCH;
    const bool group_gone = ::kill(-pid, 0) != 0 && errno == ESRCH;
    if (pid_gone && group_gone)
      return true;
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(20ms);
  }
}

/// `kilnrun --nproc-per-node 2 --grace-period-s 10 THIS_TEST --gtest_filter=DDPRank.Run`
/// for `test_case`, with the group's timeout at 2 s; kilnrun and its workers
/// are SIGKILLed after `hard_limit` (the test's own timeout).
KilnrunJob run_under_kilnrun(const std::string &test_case, std::chrono::seconds hard_limit) {
  char dir_template[] = "/tmp/kiln-ddp-kilnrun-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  std::fflush(stdout); // not twice, through the child
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0); // the hard limit kills kilnrun's group
    std::freopen((dir + "/out").c_str(), "w", stdout);
    std::freopen((dir + "/err").c_str(), "w", stderr);
    ::setenv("KILN_DDP_TEST_CASE", test_case.c_str(), 1);
    ::setenv("KILN_DDP_TEST_PID_DIR", dir.c_str(), 1);
    ::setenv("KILN_DISTRIBUTED_TIMEOUT_S", "2", 1);
    ::execl(KILNRUN_PATH, KILNRUN_PATH, "--nproc-per-node", "2", "--grace-period-s", "10", self,
            "--gtest_filter=DDPRank.Run", static_cast<char *>(nullptr));
    ::_exit(97);
  }
  KilnrunJob job;
  const auto until = std::chrono::steady_clock::now() + hard_limit;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      job.code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() > until) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  job.out = read_text(dir + "/out");
  job.err = read_text(dir + "/err");
  for (int r = 0; r < 2; ++r) {
    pid_t p = 0;
    std::ifstream(dir + "/pid." + std::to_string(r)) >> p;
    job.ranks.push_back(p);
  }
  std::system(("rm -rf " + dir).c_str());
  return job;
}

/// The seconds rank 0 reports it took to fail with kiln::Error (-1: no such line).
double rank0_failure_seconds(const std::string &out) {
  std::smatch m;
  static const std::regex line(R"(\[rank 0\]: rank 0 failed with kiln::Error after ([0-9.]+) s)");
  return std::regex_search(out, m, line) ? std::stod(m[1]) : -1;
}

/// A real DDP job under kilnrun whose rank 1 dies mid-step (exits, or is
/// SIGKILLed) or hangs there: rank 0 fails with kiln::Error within the
/// group's timeout (2 s) + 5 s, kilnrun exits non-zero naming the rank that
/// failed first and how, and no rank or process of a rank's group is left.
/// The test kills everything after 60 s (no hang).
TEST(DistributedDataParallel, UnderKilnrunARankThatDiesOrHangsMidStepFailsTheJobWithoutOrphans) {
  struct Fault {
    const char *test_case;
    int code;        ///< kilnrun's exit code
    int failed_rank; ///< the rank kilnrun names
    const char *how; ///< how kilnrun says it ended
  };
  const Fault faults[] = {
      {"kilnrun_exit", 7, 1, "exited with code 7"},
      {"kilnrun_kill", 128 + SIGKILL, 1, "was killed by signal 9 (SIGKILL)"},
      // The hung rank fails nothing itself: rank 0's timeout is the first failure.
      {"kilnrun_hang", kFailedInTime, 0, "exited with code 3"},
  };
  for (const Fault &f : faults) {
    SCOPED_TRACE(f.test_case);
    const auto start = std::chrono::steady_clock::now();
    KilnrunJob job = run_under_kilnrun(f.test_case, 60s);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(job.code, f.code) << job.err << job.out;
    ASSERT_NE(job.ranks[0], 0) << job.out;
    ASSERT_NE(job.ranks[1], 0) << job.out;
    const std::string named = "kilnrun: rank " + std::to_string(f.failed_rank) + " (pid " +
                              std::to_string(job.ranks[static_cast<size_t>(f.failed_rank)]) + ") " + f.how;
    EXPECT_NE(job.err.find(named), std::string::npos) << job.err;
    const double failed_after = rank0_failure_seconds(job.err); // the ranks' stderr is kilnrun's
    EXPECT_GE(failed_after, 0) << "rank 0 did not fail with a kiln::Error:\n" << job.err;
    EXPECT_LE(failed_after, 2.0 + 5.0) << job.err; // the group's timeout + 5 s
    for (pid_t p : job.ranks)
      EXPECT_TRUE(gone_with_its_group(p, 2000ms)) << "rank pid " << p << " or its group is alive";
    std::printf("%s: kilnrun exited %d in %.1f s; rank 0 failed after %.2f s; %s\n", f.test_case, job.code, secs,
                failed_after, named.c_str());
    if (std::getenv("KILN_DDP_TEST_VERBOSE"))
      std::printf("%s", job.err.c_str());
  }
}

} // namespace
} // namespace kiln::distributed_test
