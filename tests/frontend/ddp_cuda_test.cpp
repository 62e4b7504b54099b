// DistributedDataParallel on a CUDA model: the reducer's buckets and
// bookkeeping tensors on the parameters' device. Here the device is the
// CUDA-on-CPU simulator (KILN_CUDA_SIM=1) and the group Gloo (CUDA tensors
// staged through pinned host memory), ranks are this binary re-run as
// processes on loopback (DDPCudaRank.Run does a rank's work when
// KILN_DDP_CUDA_TEST_CASE is set). On a GPU (bench/gpu/run_checks.sh,
// KILN_TEST_REAL_CUDA=1) the NCCL case runs for real; without one it skips
// with NCCL's reason.
//
// The reference, independent of the CUDA path and of the reducer: one
// process training a CPU copy of the model on the global batch.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/runtime/distributed/ProcessGroup.h" // nccl_unavailable_reason

namespace kiln {
namespace {

using namespace std::chrono_literals;
namespace dist = kiln::distributed;

constexpr int64_t kGlobalBatch = 12, kIn = 8, kOut = 4;

bool real_cuda() { return std::getenv("KILN_TEST_REAL_CUDA") != nullptr; }

/// This rank's CUDA device: cuda:(rank % devices) on a GPU, the simulator's
/// cuda:0 (one simulator per process) here.
Device rank_device(int rank) {
  return Device(DeviceType::CUDA, real_cuda() ? rank % std::max(1, kiln::cuda::device_count()) : 0);
}

/// x [N, 8] -> Linear(8, 16) -> ReLU -> Linear(16, 4), on the cpu.
std::shared_ptr<nn::Module> make_model() {
  manual_seed(7);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kIn, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, kOut)});
}

/// Two heads; forward uses only the first (find_unused_parameters).
class TwoHeads : public nn::Module {
public:
  TwoHeads() {
    manual_seed(7);
    used = register_module("used", std::make_shared<nn::Linear>(kIn, kOut));
    unused = register_module("unused", std::make_shared<nn::Linear>(kIn, kOut));
  }
  Tensor forward(const Tensor &x) override { return used->forward(x); }
  std::string name() const override { return "TwoHeads"; }
  std::shared_ptr<nn::Linear> used, unused;
};

/// The global batch of step `s` (cpu): x [12, 8], y [12, 4].
std::pair<Tensor, Tensor> batch(int s) {
  manual_seed(1000 + static_cast<uint64_t>(s));
  return {randn({kGlobalBatch, kIn}), randn({kGlobalBatch, kOut})};
}

/// This rank's rows of `t`, on `device`.
Tensor rows_of(const Tensor &t, int rank, int world, Device device) {
  const int64_t per = kGlobalBatch / world;
  return t.narrow(0, rank * per, per).contiguous().to(device);
}

/// Largest |a - b| / max(1, |b|) over the parameters (a's moved to the cpu).
double max_rel_diff(nn::Module &a, nn::Module &b) {
  auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size())
    return 1e30;
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::vector<float> x = pa[i].detach().cpu().to_vector<float>(), y = pb[i].detach().to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k)
      worst = std::max(worst, std::abs(double(x[k]) - y[k]) / std::max(1.0, std::abs(double(y[k]))));
  }
  return worst;
}

/// The relative tolerance against the cpu: 1e-5 on the simulator (its GEMM
/// is the cpu's; the pointwise kernels round as the cpu); 1e-4 on a GPU,
/// whose GEMMs sum in another order.
double tolerance() { return real_cuda() ? 1e-4 : 1e-5; }

int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  return code;
}

/// 20 SGD steps (momentum 0.9) of DDP on this rank's rows of a CUDA model
/// vs one process on all rows of a cpu copy. `accumulate`: each step is two
/// no_sync micro-batches and a synced one (each a third of the loss).
/// Also checks that the gradients are on the model's device, and with
/// gradient_as_bucket_view that the parameters of one bucket share its
/// storage.
int train_and_compare(int rank, int world, bool accumulate, const dist::DDPOptions &options) {
  const Device device = rank_device(rank);
  auto model = make_model(), reference = make_model();
  model->to(device);
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, options);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  auto loss_of = [&](const Tensor &x, const Tensor &y) {
    return nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world, device)), rows_of(y, rank, world, device));
  };
  for (int s = 0; s < 20; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    ref_opt.zero_grad();
    if (accumulate) {
      {
        auto guard = ddp->no_sync();
        for (int m = 0; m < 2; ++m)
          (loss_of(x, y) * (1.0 / 3)).backward();
      }
      (loss_of(x, y) * (1.0 / 3)).backward();
    } else {
      loss_of(x, y).backward();
    }
    nn::functional::mse_loss(reference->forward(x), y).backward();
    for (const Tensor &p : model->parameters())
      if (p.grad().device() != device)
        return fail(2, "rank %d: a gradient on %s", rank, p.grad().device().str().c_str());
    if (options.gradient_as_bucket_view) {
      for (const std::vector<size_t> &bucket : ddp->bucket_indices())
        for (size_t i : bucket)
          if (model->parameters()[i].grad().impl()->storage != model->parameters()[bucket[0]].grad().impl()->storage)
            return fail(3, "rank %d: parameter %zu's gradient is not a view of its bucket", rank, i);
    }
    opt.step();
    ref_opt.step();
  }
  const double diff = max_rel_diff(*model, *reference);
  std::fprintf(stderr, "rank %d of %d on %s: parameters within %.3g of the single cpu process\n", rank, world,
               device.str().c_str(), diff);
  if (diff > tolerance())
    return fail(1, "rank %d: parameters differ from the single process by %g", rank, diff);
  return 0;
}

/// find_unused_parameters on a CUDA model: 10 steps with a head no rank uses
/// (its .grad() stays undefined, as torch).
int unused_head(int rank, int world) {
  const Device device = rank_device(rank);
  auto model = std::make_shared<TwoHeads>();
  auto reference = std::make_shared<TwoHeads>();
  model->to(device);
  dist::DDPOptions o;
  o.find_unused_parameters = true;
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, o);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05));
  for (int s = 0; s < 10; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    ref_opt.zero_grad();
    nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world, device)), rows_of(y, rank, world, device)).backward();
    nn::functional::mse_loss(reference->forward(x), y).backward();
    if (model->unused->weight.grad().defined())
      return fail(3, "rank %d: the unused head got a gradient", rank);
    opt.step();
    ref_opt.step();
  }
  const double diff = max_rel_diff(*model, *reference);
  return diff <= tolerance() ? 0 : fail(1, "rank %d: find_unused_parameters run differs by %g", rank, diff);
}

/// bf16_compress on CUDA buckets: 5 steps within 2e-2 of the single process
/// (the all-reduce in bfloat16, 8 bits of mantissa), and not equal to it.
int bf16_hook(int rank, int world) {
  const Device device = rank_device(rank);
  auto model = make_model(), reference = make_model();
  model->to(device);
  dist::DDPOptions o;
  o.comm_hook = "bf16_compress";
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, o);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05));
  for (int s = 0; s < 5; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    ref_opt.zero_grad();
    nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world, device)), rows_of(y, rank, world, device)).backward();
    nn::functional::mse_loss(reference->forward(x), y).backward();
    opt.step();
    ref_opt.step();
  }
  const double d = max_rel_diff(*model, *reference);
  return d <= 2e-2 && d > 0 ? 0 : fail(1, "rank %d: bf16 hook differs by %g", rank, d);
}

/// KILN_DISTRIBUTED_DEBUG=DETAIL with rank 1 alone compressing its CUDA
/// buckets to bfloat16: the one bucket's all-reduce (212 elements) is a
/// desync (float32 vs bfloat16 elements), reported on every rank as a
/// kiln::Error naming both collectives instead of a hang or garbage.
int desync(int rank) {
  const Device device = rank_device(rank);
  auto model = make_model();
  model->to(device);
  dist::DDPOptions o;
  if (rank == 1)
    o.comm_hook = "bf16_compress";
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, o);
  auto [x, y] = batch(0);
  try {
    nn::functional::mse_loss(ddp->forward(rows_of(x, rank, 2, device)), rows_of(y, rank, 2, device)).backward();
    return fail(1, "rank %d: no error", rank);
  } catch (const Error &e) {
    const std::string what = e.what();
    const bool named =
        what.find("collective desync (KILN_DISTRIBUTED_DEBUG=DETAIL): rank 0 runs allreduce") != std::string::npos &&
        what.find("(float32, 212 elements) but rank 1 runs allreduce") != std::string::npos &&
        what.find("(bfloat16, 212 elements)") != std::string::npos;
    return named ? 0 : fail(2, "rank %d: unexpected error: %s", rank, e.what());
  }
}

/// Parameters on two devices: a kiln::Error naming both (one rank).
int mixed_devices(int rank) {
  auto model = std::make_shared<TwoHeads>();
  model->unused->to(rank_device(rank));
  try {
    dist::DistributedDataParallel ddp(model);
    return 1;
  } catch (const Error &e) {
    const std::string what = e.what();
    const std::string expected = "DistributedDataParallel: parameter 'unused.weight' [4, 8] float32 is on cuda:0 but "
                                 "parameter 'used.weight' [4, 8] float32 is on cpu (expected every parameter on one "
                                 "device";
    return what.find(expected) != std::string::npos ? 0 : fail(2, "unexpected error: %s", e.what());
  }
}

int rank_main(const std::string &test_case, int rank, int world) {
  if (!real_cuda())
    ::setenv("KILN_CUDA_SIM", "1", 1); // before this rank's first CUDA tensor
  dist::InitOptions init;
  if (test_case == "nccl")
    init.backend = "nccl";
  dist::init_process_group(init); // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the parent
  if (test_case == "equal" || test_case == "debug" || test_case == "nccl")
    return train_and_compare(rank, world, false, {});
  if (test_case == "bucket_views") {
    dist::DDPOptions o;
    o.gradient_as_bucket_view = true;
    return train_and_compare(rank, world, false, o);
  }
  if (test_case == "small_bucket_views") {
    dist::DDPOptions o;
    o.first_bucket_cap_mb = o.bucket_cap_mb = 0.0001; // one bucket per parameter: the rebuild and launch order
    o.gradient_as_bucket_view = true;
    return train_and_compare(rank, world, false, o);
  }
  if (test_case == "no_sync")
    return train_and_compare(rank, world, true, {});
  if (test_case == "unused")
    return unused_head(rank, world);
  if (test_case == "bf16")
    return bf16_hook(rank, world);
  if (test_case == "mixed")
    return mixed_devices(rank);
  if (test_case == "desync")
    return desync(rank);
  return 99;
}

TEST(DDPCudaRank, Run) {
  const char *test_case = std::getenv("KILN_DDP_CUDA_TEST_CASE");
  if (!test_case)
    GTEST_SKIP() << "the rank side of the DDP-on-CUDA tests (run by them)";
  const int rank = std::atoi(std::getenv("RANK")), world = std::atoi(std::getenv("WORLD_SIZE"));
  int code = 98;
  try {
    code = rank_main(test_case, rank, world);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
  }
  std::fflush(stderr);
  dist::destroy_process_group();
  ::_exit(code);
}

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// Runs `world` ranks of `test_case` as processes (extra environment
/// `env`: NAME=VALUE); returns their exit codes (-signal when killed).
/// Ranks still running after `limit` are SIGKILLed.
std::vector<int> run_ranks(const std::string &test_case, int world, std::chrono::seconds limit = 180s,
                           const std::vector<std::pair<std::string, std::string>> &env = {}) {
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("KILN_DDP_CUDA_TEST_CASE", test_case.c_str(), 1);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("KILN_DISTRIBUTED_TIMEOUT_S", "60", 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      for (const auto &[name, value] : env)
        ::setenv(name.c_str(), value.c_str(), 1);
      ::execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=DDPCudaRank.Run", static_cast<char *>(nullptr));
      ::_exit(97);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(world), -1000);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t left = pids.size();
  while (left > 0) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (codes[r] != -1000)
        continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        --left;
      }
    }
    if (std::chrono::steady_clock::now() > deadline)
      for (size_t r = 0; r < pids.size(); ++r)
        if (codes[r] == -1000)
          ::kill(pids[r], SIGKILL);
    std::this_thread::sleep_for(10ms);
  }
  return codes;
}

/// The Gloo tests run on the simulator (a GPU run of this binary does the
/// NCCL test only: bench/gpu/run_checks.sh filters).
TEST(DDPCuda, EagerTwentyStepsOnTwoAndThreeRanksEqualOneCpuProcessOnTheGlobalBatch) {
  for (int world : {2, 3})
    EXPECT_EQ(run_ranks("equal", world), std::vector<int>(world, 0)) << world << " ranks";
}

TEST(DDPCuda, GradientsAsBucketViewsInOneBucketAndInOneBucketPerParameter) {
  EXPECT_EQ(run_ranks("bucket_views", 2), std::vector<int>(2, 0));
  EXPECT_EQ(run_ranks("small_bucket_views", 2), std::vector<int>(2, 0));
}

TEST(DDPCuda, NoSyncAccumulationEqualsTheLargeBatch) { EXPECT_EQ(run_ranks("no_sync", 2), std::vector<int>(2, 0)); }

TEST(DDPCuda, FindUnusedParametersAndTheBf16CompressionHook) {
  EXPECT_EQ(run_ranks("unused", 2), std::vector<int>(2, 0));
  EXPECT_EQ(run_ranks("bf16", 2), std::vector<int>(2, 0));
}

/// KILN_DISTRIBUTED_DEBUG=DETAIL: every collective's fingerprint compared
/// across ranks (the model check's gathers, the rebuilt order's broadcast,
/// the CUDA buckets) and the run still equals the single process.
TEST(DDPCuda, DebugModeFingerprintsEveryCollective) {
  EXPECT_EQ(run_ranks("debug", 2, 180s, {{"KILN_DISTRIBUTED_DEBUG", "DETAIL"}}), std::vector<int>(2, 0));
}

TEST(DDPCuda, DebugModeReportsADesyncOfTheCudaBucketsOnEveryRank) {
  EXPECT_EQ(run_ranks("desync", 2, 180s, {{"KILN_DISTRIBUTED_DEBUG", "DETAIL"}}), std::vector<int>(2, 0));
}

TEST(DDPCuda, ParametersOnTwoDevicesAreAnErrorNamingBoth) { EXPECT_EQ(run_ranks("mixed", 1), std::vector<int>{0}); }

/// Backend "nccl" on the GPU: one rank per GPU, at most 2 (one H200: one
/// rank; NCCL rejects two ranks of one communicator on the same GPU,
/// "Duplicate GPU detected"); then again with KILN_DISTRIBUTED_DEBUG=DETAIL,
/// every collective's fingerprint all-gathered through device memory first
/// (NcclOptions::check_fingerprints, exercised on one rank too). Skips
/// without NCCL and a GPU, with the reason; on the device script
/// (KILN_TEST_REAL_CUDA=1) that is a failure.
TEST(DDPCuda, NcclOnTheGpuEqualsOneCpuProcessOnTheGlobalBatch) {
  const std::string why = runtime::distributed::nccl_unavailable_reason();
  if (!why.empty()) {
    if (real_cuda())
      FAIL() << "KILN_TEST_REAL_CUDA=1 but " << why;
    GTEST_SKIP() << why;
  }
  const int world = std::min(2, kiln::cuda::device_count());
  EXPECT_EQ(run_ranks("nccl", world), std::vector<int>(world, 0)) << world << " ranks";
  EXPECT_EQ(run_ranks("nccl", world, 180s, {{"KILN_DISTRIBUTED_DEBUG", "DETAIL"}}), std::vector<int>(world, 0))
      << world << " ranks, fingerprints checked";
}

} // namespace
} // namespace kiln
