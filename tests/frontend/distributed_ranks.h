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

// ---- DDP against one process, shared by the cpu and the CUDA rank cases ----

/// How a DDP-vs-one-process case runs: the DDP model's device (the reference
/// is always a cpu copy of the model training on the global batch), the
/// relative tolerance of max_rel_diff, and optionally kiln::compile options
/// (DDP then wraps kiln::compile(model, *compile): the gradients reach the
/// reducer from the compiled backward's AccumulateGrad).
struct DdpCase {
  Device device = kCPU;
  double tolerance = 1e-5;
  const CompileOptions *compile = nullptr;
};

/// Prints the printf-style message and a newline to stderr; returns `code`.
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/// 20 SGD steps (lr 0.05, momentum 0.9, MSE) of DDP on this rank's rows vs
/// one process on all rows. `accumulate`: each step is two no_sync
/// micro-batches and a synced one (each a third of the loss: the mean of
/// equal parts' means is the mean). Exit codes: 0 within c.tolerance, 1
/// differs, 2 a gradient off c.device or no buckets, 3 with
/// gradient_as_bucket_view a gradient that is not a view of its bucket, 4
/// with c.compile a model that did not run compiled (no fused kernel, or a
/// graph break).
int ddp_train_and_compare(int rank, int world, bool accumulate, const dist::DDPOptions &options, const DdpCase &c);

/// find_unused_parameters: 10 SGD steps with a head the forward never uses
/// (TwoHeads); its .grad() stays undefined, as torch (exit 3 otherwise).
int ddp_unused_head(int rank, int world, const DdpCase &c);

/// comm_hook "bf16_compress" (the all-reduce in bfloat16, 8 bits of
/// mantissa): 5 steps within 2e-2 of the single process, and not equal to it.
int ddp_bf16_hook(int rank, int world, const DdpCase &c);

} // namespace kiln::distributed_test
