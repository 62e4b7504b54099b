// The harness of the distributed tests (kiln-distributed-tests: ddp_test.cpp,
// sync_batch_norm_test.cpp, collectives_test.cpp): ranks are this binary
// re-run as processes meeting on loopback. DDPRank.Run (distributed_ranks.cpp)
// does a rank's work when KILN_DDP_TEST_CASE names a case that a test file
// registered with register_rank_cases; run_ranks starts the ranks and
// collects their exit codes. The reference is one process training a copy
// of the model on the global batch.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::distributed_test {

using namespace std::chrono_literals;
namespace dist = kiln::distributed;

constexpr int64_t kGlobalBatch = 12, kIn = 8, kOut = 4;

/// Linear(8, hidden) -> ReLU -> Linear(hidden, 4), seeded (the same on every rank).
std::shared_ptr<nn::Module> make_model(int64_t hidden = 16);

/// Two Linear(8, 4) heads, seeded; forward uses only the first
/// (find_unused_parameters: the second never gets a gradient).
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

/// The global batch of step `s`: x [12, 8], y [12, 4].
std::pair<Tensor, Tensor> batch(int s);

/// Rank `rank`'s equal share of the rows of `t` (kGlobalBatch rows), on `device`.
Tensor rows_of(const Tensor &t, int rank, int world, Device device = kCPU);

/// Largest relative difference between the two models' float32 parameters
/// (|x - y| / max(1, |y|); either model on any device; 1e30 when the
/// parameter lists differ in length).
double max_rel_diff(nn::Module &a, nn::Module &b);

/// A rank-side case: runs on rank `rank` of `world` after
/// init_process_group(); returns the rank's exit code (0: as expected).
using RankCase = std::function<int(int rank, int world)>;

/// Makes `cases` runnable as KILN_DDP_TEST_CASE=name; call it from a
/// namespace-scope initializer (returns true). A name registered twice aborts.
bool register_rank_cases(std::vector<std::pair<std::string, RankCase>> cases);

/// Runs `world` ranks of `test_case` as processes; returns their exit codes
/// (-signal when killed). Ranks still running after `limit` are SIGKILLed.
/// The group's timeout (KILN_DISTRIBUTED_TIMEOUT_S) is 20 s, or 2 s for the
/// cases "exit" and "hang"; `env` (NAME, VALUE) is set in each rank after
/// these, e.g. KILN_DISTRIBUTED_DEBUG=DETAIL, or KILN_DDP_TEST_BACKEND=nccl
/// (the backend init_process_group gets; default gloo).
std::vector<int> run_ranks(const std::string &test_case, int world, std::chrono::seconds limit = 60s,
                           const std::vector<std::pair<std::string, std::string>> &env = {});

} // namespace kiln::distributed_test
