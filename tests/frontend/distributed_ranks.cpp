// The harness of kiln-distributed-tests (distributed_ranks.h): the rank
// cases' registry, the rank side (DDPRank.Run) and run_ranks, plus the
// model, batches and comparison the DDP and collective cases share.
#include "distributed_ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "distributed_support.h"

namespace kiln::distributed_test {

std::shared_ptr<nn::Module> make_model(int64_t hidden) {
  manual_seed(7);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kIn, hidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden, kOut)});
}

/// The global batch of step `s`: x [12, 8], y [12, 4].
std::pair<Tensor, Tensor> batch(int s) {
  manual_seed(1000 + static_cast<uint64_t>(s));
  return {randn({kGlobalBatch, kIn}), randn({kGlobalBatch, kOut})};
}

Tensor rows_of(const Tensor &t, int rank, int world, Device device) {
  const int64_t per = kGlobalBatch / world;
  return t.narrow(0, rank * per, per).contiguous().to(device);
}

/// Largest relative difference between the two models' parameters.
double max_rel_diff(nn::Module &a, nn::Module &b) {
  auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size())
    return 1e30;
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::vector<float> x = pa[i].detach().cpu().to_vector<float>(), y = pb[i].detach().cpu().to_vector<float>();
    for (size_t k = 0; k < x.size(); ++k)
      worst = std::max(worst, std::abs(double(x[k]) - y[k]) / std::max(1.0, std::abs(double(y[k]))));
  }
  return worst;
}

namespace {

std::map<std::string, RankCase> &rank_cases() {
  static std::map<std::string, RankCase> cases;
  return cases;
}

} // namespace

bool register_rank_cases(std::vector<std::pair<std::string, RankCase>> cases) {
  for (auto &[name, fn] : cases)
    if (!rank_cases().emplace(name, std::move(fn)).second) {
      std::fprintf(stderr, "kiln-distributed-tests: rank case '%s' registered twice\n", name.c_str());
      std::abort();
    }
  return true;
}

namespace {

/// Exit codes of the rank side that are not a case's own.
constexpr int kUnknownCase = 99, kCaseThrew = 98;

TEST(DDPRank, Run) {
  const char *test_case = std::getenv("KILN_DDP_TEST_CASE");
  if (!test_case)
    GTEST_SKIP() << "the rank side of the DistributedDataParallel tests (run by them)";
  const int rank = std::atoi(std::getenv("RANK")), world = std::atoi(std::getenv("WORLD_SIZE"));
  int code = kCaseThrew;
  try {
    auto it = rank_cases().find(test_case);
    if (it == rank_cases().end()) {
      std::fprintf(stderr, "rank %d: no rank case '%s'\n", rank, test_case);
      code = kUnknownCase;
    } else {
      dist::InitOptions init; // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the parent
      if (const char *backend = std::getenv("KILN_DDP_TEST_BACKEND"))
        init.backend = backend;
      dist::init_process_group(init);
      code = it->second(rank, world);
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
  }
  std::fflush(stderr);
  dist::destroy_process_group();
  ::_exit(code);
}

} // namespace

std::vector<int> run_ranks(const std::string &test_case, int world, std::chrono::seconds limit,
                           const std::vector<std::pair<std::string, std::string>> &env) {
  const std::string port = std::to_string(test_support::free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("KILN_DDP_TEST_CASE", test_case.c_str(), 1);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv("KILN_DISTRIBUTED_TIMEOUT_S", test_case == "exit" || test_case == "hang" ? "2" : "20", 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      for (const auto &[name, value] : env)
        ::setenv(name.c_str(), value.c_str(), 1);
      ::execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=DDPRank.Run", static_cast<char *>(nullptr));
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
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (codes[r] == -1000)
          ::kill(pids[r], SIGKILL);
    }
    std::this_thread::sleep_for(10ms);
  }
  return codes;
}

int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  return code;
}

int ddp_train_and_compare(int rank, int world, bool accumulate, const dist::DDPOptions &options, const DdpCase &c) {
  auto model = make_model(), reference = make_model();
  model->to(c.device);
  std::shared_ptr<nn::Module> wrapped = model;
  if (c.compile)
    wrapped = kiln::compile(model, *c.compile);
  auto ddp = std::make_shared<dist::DistributedDataParallel>(wrapped, options);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  auto loss_of = [&](const Tensor &x, const Tensor &y) {
    return nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world, c.device)), rows_of(y, rank, world, c.device));
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
      if (p.grad().device() != c.device)
        return fail(2, "rank %d: a gradient on %s, expected %s", rank, p.grad().device().str().c_str(),
                    c.device.str().c_str());
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
  std::fprintf(stderr, "rank %d of %d on %s%s: parameters within %.3g of the single cpu process\n", rank, world,
               c.device.str().c_str(), c.compile ? " (compiled)" : "", diff);
  if (diff > c.tolerance)
    return fail(1, "rank %d: parameters differ from the single process by %g (tolerance %g)", rank, diff, c.tolerance);
  if (ddp->bucket_indices().empty())
    return fail(2, "rank %d: no buckets", rank);
  if (auto compiled = std::dynamic_pointer_cast<CompiledModule>(wrapped)) {
    const CompileStats &st = compiled->stats();
    std::fprintf(stderr, "rank %d: %d compiles, %d fused kernels, %zu graph breaks, %d CUDA graph replays\n", rank,
                 st.compiles, st.num_fusions, compiled->graph_breaks().size(), st.cuda_graph_replays);
    if (st.compiles < 1 || st.num_fusions < 1 || !compiled->graph_breaks().empty())
      return fail(4, "rank %d: the model did not run compiled without graph breaks", rank);
  }
  return 0;
}

int ddp_unused_head(int rank, int world, const DdpCase &c) {
  auto model = std::make_shared<TwoHeads>();
  auto reference = std::make_shared<TwoHeads>();
  model->to(c.device);
  dist::DDPOptions o;
  o.find_unused_parameters = true;
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, o);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05));
  for (int s = 0; s < 10; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    ref_opt.zero_grad();
    nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world, c.device)), rows_of(y, rank, world, c.device)).backward();
    nn::functional::mse_loss(reference->forward(x), y).backward();
    if (model->unused->weight.grad().defined())
      return fail(3, "rank %d: the unused head got a gradient", rank);
    opt.step();
    ref_opt.step();
  }
  const double diff = max_rel_diff(*model, *reference);
  return diff <= c.tolerance ? 0 : fail(1, "rank %d: find_unused_parameters run differs by %g", rank, diff);
}

int ddp_bf16_hook(int rank, int world, const DdpCase &c) {
  auto model = make_model(), reference = make_model();
  model->to(c.device);
  dist::DDPOptions o;
  o.comm_hook = "bf16_compress";
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, o);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05));
  for (int s = 0; s < 5; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    ref_opt.zero_grad();
    nn::functional::mse_loss(ddp->forward(rows_of(x, rank, world, c.device)), rows_of(y, rank, world, c.device)).backward();
    nn::functional::mse_loss(reference->forward(x), y).backward();
    opt.step();
    ref_opt.step();
  }
  const double d = max_rel_diff(*model, *reference);
  return d <= 2e-2 && d > 0 ? 0 : fail(1, "rank %d: bf16 hook differs by %g", rank, d);
}

} // namespace kiln::distributed_test
