// SyncBatchNorm (kiln::nn::SyncBatchNorm) across real processes on loopback
// (the harness: distributed_ranks.h) and in one process. The reference is
// plain BatchNorm on the global batch in one process; the per-rank shards
// may differ in size (and be empty).
#include <gtest/gtest.h>

#include "bad_cases.h"
#include "distributed_ranks.h"
#include "kiln/runtime/distributed/ProcessGroup.h" // HashStore

namespace kiln::distributed_test {
namespace {

/// Rows [offset of `rank`, + sizes[rank]) of `t`: the shards of a global batch
/// split as `sizes` (which sum to its rows).
Tensor shard_rows(const Tensor &t, const std::vector<int64_t> &sizes, int rank) {
  int64_t offset = 0;
  for (int r = 0; r < rank; ++r)
    offset += sizes[static_cast<size_t>(r)];
  return t.narrow(0, offset, sizes[static_cast<size_t>(rank)]).contiguous();
}

/// The per-rank batch sizes of the "syncbn_ddp" variants (of kGlobalBatch rows).
std::vector<int64_t> syncbn_split(const std::string &variant, int world) {
  if (variant == "equal")
    return std::vector<int64_t>(static_cast<size_t>(world), kGlobalBatch / world);
  if (variant == "unequal")
    return world == 2 ? std::vector<int64_t>{5, 7} : std::vector<int64_t>{2, 4, 6};
  // "empty": rank 0 has no rows.
  return world == 2 ? std::vector<int64_t>{0, 12} : std::vector<int64_t>{0, 5, 7};
}

/// [N, ...] -> [N, shape...] (the test models' view between layers).
class Reshape : public nn::Module {
public:
  explicit Reshape(Shape shape) : shape_(std::move(shape)) {}
  Tensor forward(const Tensor &x) override {
    Shape s{x.size(0)};
    s.insert(s.end(), shape_.begin(), shape_.end());
    return x.reshape(s);
  }
  std::string name() const override { return "Reshape"; }

private:
  Shape shape_;
};

/// x [N, 8] -> Linear(8, 12) -> BatchNorm1d(12) on [N, 12] -> ReLU ->
/// Linear(12, 12) -> [N, 3, 4] -> BatchNorm1d(3) on [N, 3, 4] (cumulative
/// momentum) -> ReLU -> [N, 12] -> Linear(12, 4).
std::shared_ptr<nn::Module> make_bn_model() {
  manual_seed(7);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kIn, 12), std::make_shared<nn::BatchNorm1d>(12), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(12, 12), std::make_shared<Reshape>(Shape{3, 4}),
      std::make_shared<nn::BatchNorm1d>(nn::BatchNormOptions(3).momentum(std::nullopt)), std::make_shared<nn::ReLU>(),
      std::make_shared<Reshape>(Shape{12}), std::make_shared<nn::Linear>(12, kOut)});
}

/// Largest relative difference between two lists of float tensors (same
/// names in the same order; integer tensors must be equal).
double max_rel_diff(const std::vector<std::pair<std::string, Tensor>> &a,
                    const std::vector<std::pair<std::string, Tensor>> &b) {
  if (a.size() != b.size())
    return 1e30;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.sizes() != b[i].second.sizes())
      return 1e30;
    Tensor x = a[i].second.detach().cpu().to(kFloat64).contiguous(),
           y = b[i].second.detach().cpu().to(kFloat64).contiguous();
    for (int64_t k = 0; k < x.numel(); ++k) {
      const double xv = x.data_ptr<double>()[k], yv = y.data_ptr<double>()[k];
      worst = std::max(worst, std::abs(xv - yv) / std::max(1.0, std::abs(yv)));
    }
  }
  return worst;
}

/// Sum of squared errors scaled so that the ranks' mean of it is the global
/// batch's mse (whatever the shard sizes): DDP averages the ranks' gradients.
Tensor shard_mse(const Tensor &out, const Tensor &target, int world) {
  Tensor d = out - target;
  return sum(d * d) * (double(world) / double(kGlobalBatch * kOut));
}

/// 20 SGD steps (momentum 0.9) of convert_sync_batchnorm(make_bn_model())
/// under DistributedDataParallel on this rank's shard vs make_bn_model() on
/// the global batch: parameters and buffers (running stats,
/// num_batches_tracked) within 1e-5, then eval outputs on the global batch.
/// "compiled": DDP wraps kiln::compile(model) (SyncBatchNorm is a graph break).
/// "cuda": the model on the CUDA-on-CPU simulator (each rank its own cuda:0;
/// the statistics and gradient sums are exchanged on the device, as NCCL
/// needs), unequal shards; the reference stays on the cpu.
int syncbn_ddp(const std::string &variant, int rank, int world) {
  const bool compiled = variant == "compiled", cuda = variant == "cuda";
  const std::vector<int64_t> sizes = syncbn_split(compiled || cuda ? "unequal" : variant, world);
  if (cuda)
    ::setenv("KILN_CUDA_SIM", "1", 1); // before this rank's first CUDA tensor
  const Device device = cuda ? Device(DeviceType::CUDA, 0) : kCPU;
  auto model = nn::SyncBatchNorm::convert_sync_batchnorm(make_bn_model());
  auto reference = make_bn_model();
  if (!std::dynamic_pointer_cast<nn::SyncBatchNorm>(model->named_children()[1].second))
    return 2;
  model->to(device);
  std::shared_ptr<nn::Module> wrapped = compiled ? kiln::compile(model) : model;
  auto ddp = std::make_shared<dist::DistributedDataParallel>(wrapped);
  optim::SGD opt(ddp->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < 20; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    ref_opt.zero_grad();
    shard_mse(ddp->forward(shard_rows(x, sizes, rank).to(device)), shard_rows(y, sizes, rank).to(device), world)
        .backward();
    nn::functional::mse_loss(reference->forward(x), y).backward();
    opt.step();
    ref_opt.step();
  }
  const double params = max_rel_diff(model->named_parameters(), reference->named_parameters());
  const double buffers = max_rel_diff(model->named_buffers(), reference->named_buffers());
  ddp->eval();
  reference->eval();
  auto [x, y] = batch(100);
  Tensor out = ddp->forward(x.to(device)), ref_out = reference->forward(x);
  const double eval = max_rel_diff({{"out", out}}, {{"out", ref_out}});
  if (params > 1e-5 || buffers > 1e-5 || eval > 1e-5) {
    std::fprintf(stderr, "rank %d (%s): parameters differ by %g, buffers by %g, eval outputs by %g\n", rank,
                 variant.c_str(), params, buffers, eval);
    return 1;
  }
  return 0;
}

/// One SyncBatchNorm forward and backward on [N_r, 3, 2, 2] shards (unequal)
/// vs BatchNorm2d on the global [12, 3, 2, 2]: outputs, input gradients,
/// weight/bias gradients summed over the ranks, running stats; then eval on
/// rank 0 alone (no communication: a collective would fail without the
/// peers) equals BatchNorm2d's eval. For float32 (1e-5) and float64 (1e-10),
/// with and without affine/track_running_stats.
int syncbn_grad_case(int rank, int world, DType dtype, bool affine_and_track) {
  const std::vector<int64_t> sizes = syncbn_split("unequal", world);
  const double tol = dtype == kFloat64 ? 1e-10 : 1e-5;
  manual_seed(11);
  Tensor x = randn({kGlobalBatch, 3, 2, 2}).to(dtype) * 2.0 + 0.5, g = randn({kGlobalBatch, 3, 2, 2}).to(dtype);
  auto opts = nn::BatchNormOptions(3).affine(affine_and_track).track_running_stats(affine_and_track).momentum(0.3);
  nn::SyncBatchNorm bn(opts);
  nn::BatchNorm2d ref(opts);
  bn.to(dtype);
  ref.to(dtype);
  if (affine_and_track) {
    NoGradGuard no_grad;
    Tensor w = randn({3}).to(dtype), b = randn({3}).to(dtype);
    bn.weight.copy_(w), ref.weight.copy_(w), bn.bias.copy_(b), ref.bias.copy_(b);
  }
  Tensor xr = shard_rows(x, sizes, rank).requires_grad_(), xg = x.clone().requires_grad_();
  Tensor yr = bn.forward(xr), yg = ref.forward(xg);
  sum(yr * shard_rows(g, sizes, rank)).backward();
  sum(yg * g).backward();
  double worst = max_rel_diff({{"y", yr}, {"dx", xr.grad()}},
                              {{"y", shard_rows(yg, sizes, rank)}, {"dx", shard_rows(xg.grad(), sizes, rank)}});
  if (affine_and_track) {
    Tensor dw = bn.weight.grad().contiguous(), db = bn.bias.grad().contiguous();
    dist::all_reduce(dw);
    dist::all_reduce(db);
    worst =
        std::max(worst, max_rel_diff({{"dw", dw}, {"db", db}}, {{"dw", ref.weight.grad()}, {"db", ref.bias.grad()}}));
    worst = std::max(worst, max_rel_diff(bn.named_buffers(), ref.named_buffers()));
  }
  dist::barrier(); // every rank is done with its collectives
  if (rank == 0) {
    bn.eval();
    ref.eval();
    Tensor xe = shard_rows(x, sizes, 0);
    worst = std::max(worst, max_rel_diff({{"eval", bn.forward(xe)}}, {{"eval", ref.forward(xe)}}));
  }
  if (worst > tol) {
    std::fprintf(stderr, "rank %d (%s, affine/track %d): differs from BatchNorm2d by %g\n", rank, dtype_name(dtype),
                 int(affine_and_track), worst);
    return 1;
  }
  return 0;
}

int syncbn_rank_main(const std::string &test_case, int rank, int world) {
  if (test_case.rfind("syncbn_ddp_", 0) == 0)
    return syncbn_ddp(test_case.substr(11), rank, world);
  if (test_case == "syncbn_grad") {
    for (DType dtype : {kFloat32, kFloat64})
      for (bool full : {true, false})
        if (int code = syncbn_grad_case(rank, world, dtype, full))
          return code;
    return 0;
  }
  if (test_case == "syncbn_too_few") { // one value per channel over both ranks: [1, 4] and [0, 4]
    nn::SyncBatchNorm bn(4);
    try {
      bn.forward(zeros({rank == 0 ? 1 : 0, 4}));
      return 1;
    } catch (const Error &e) {
      const std::string what = e.what();
      return what.find("SyncBatchNorm: expected more than 1 value per channel when training, got 1 over the 2 ranks") !=
                     std::string::npos
                 ? 0
                 : (std::fprintf(stderr, "%s\n", e.what()), 3);
    }
  }
  return 99;
}

const bool registered = [] {
  std::vector<std::pair<std::string, RankCase>> cases;
  for (const char *name : {"syncbn_ddp_equal", "syncbn_ddp_unequal", "syncbn_ddp_empty", "syncbn_ddp_compiled",
                           "syncbn_ddp_cuda", "syncbn_grad", "syncbn_too_few"})
    cases.emplace_back(name,
                       [name = std::string(name)](int rank, int world) { return syncbn_rank_main(name, rank, world); });
  return register_rank_cases(std::move(cases));
}();

TEST(SyncBatchNorm, DDPTwentyStepsOnTwoAndThreeRanksEqualBatchNormOnTheGlobalBatch) {
  for (const char *variant : {"equal", "unequal", "empty", "compiled", "cuda"})
    for (int world : {2, 3})
      EXPECT_EQ(run_ranks(std::string("syncbn_ddp_") + variant, world, 60s), std::vector<int>(world, 0))
          << variant << " shards on " << world << " ranks";
}

TEST(SyncBatchNorm, InputAndParameterGradientsAndEvalEqualBatchNorm2dOnTheGlobalBatch) {
  for (int world : {2, 3})
    EXPECT_EQ(run_ranks("syncbn_grad", world, 60s), std::vector<int>(world, 0)) << world;
}

TEST(SyncBatchNorm, FewerThanTwoValuesPerChannelOverAllRanksIsAnErrorOnEveryRank) {
  EXPECT_EQ(run_ranks("syncbn_too_few", 2, 60s), std::vector<int>(2, 0));
}

TEST(SyncBatchNorm, BadInputAndTrainingWithoutAProcessGroup) {
  ASSERT_FALSE(dist::is_initialized());
  nn::SyncBatchNorm bn(4);
  test_support::expect_kiln_errors({
      {"no group",
       [&] {
         bn.forward(randn({3, 4}));
       },
       {"SyncBatchNorm", "not initialized", "init_process_group()"}},
      {"channels",
       [&] {
         bn.forward(randn({3, 5}));
       },
       {"SyncBatchNorm", "expected 4 channels", "[3, 5]"}},
      {"rank 1", [&] { bn.forward(randn({4})); }, {"SyncBatchNorm", "rank >= 2", "[4]"}},
      {"dtype",
       [&] {
         bn.forward(zeros({3, 4}, kInt64));
       },
       {"SyncBatchNorm", "floating point", "int64"}},
      {"undefined", [&] { bn.forward(Tensor()); }, {"SyncBatchNorm", "undefined"}},
      {"convert null", [] { nn::SyncBatchNorm::convert_sync_batchnorm(nullptr); }, {"convert_sync_batchnorm"}},
  });
}

TEST(SyncBatchNorm, EvalWithoutAGroupAndTrainingOnOneRankAreBatchNorm) {
  nn::SyncBatchNorm bn(3);
  nn::BatchNorm2d ref(3);
  {
    NoGradGuard no_grad;
    for (auto *m : {static_cast<nn::BatchNormBase *>(&bn), static_cast<nn::BatchNormBase *>(&ref)}) {
      m->running_mean.copy_(tensor(std::vector<float>{0.5f, -1.0f, 2.0f}, {3}));
      m->running_var.copy_(tensor(std::vector<float>{2.0f, 0.5f, 1.5f}, {3}));
    }
  }
  manual_seed(3);
  Tensor x = randn({4, 3, 2, 2});
  bn.eval();
  ref.eval();
  EXPECT_LE(max_rel_diff({{"y", bn.forward(x)}}, {{"y", ref.forward(x)}}), 1e-6);
  // A group of one rank: BatchNorm's training forward (torch: need_sync false).
  dist::init_process_group(std::make_shared<runtime::distributed::HashStore>(), 0, 1);
  bn.train();
  ref.train();
  Tensor y = bn.forward(x), r = ref.forward(x);
  dist::destroy_process_group();
  EXPECT_LE(max_rel_diff({{"y", y}}, {{"y", r}}), 1e-6);
  EXPECT_LE(max_rel_diff(bn.named_buffers(), ref.named_buffers()), 1e-6);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
}

TEST(SyncBatchNorm, ConvertReplacesNestedBatchNormsKeepingValuesDtypeModeAndFlags) {
  manual_seed(5);
  auto inner = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::BatchNorm2d>(nn::BatchNormOptions(2).eps(1e-3).momentum(0.2))});
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3), inner});
  model->to(kFloat64);
  {
    NoGradGuard no_grad;
    for (auto &[name, t] : model->state_dict())
      if (t.is_floating_point())
        t.copy_(randn(t.sizes()).to(kFloat64));
  }
  auto bn1 = std::dynamic_pointer_cast<nn::BatchNorm1d>(model->named_children()[1].second);
  bn1->bias.requires_grad_(false);
  bn1->eval();
  const auto before = model->state_dict();
  std::vector<std::pair<std::string, Tensor>> copied;
  for (auto &[name, t] : before)
    copied.emplace_back(name, t.clone());

  auto converted = nn::SyncBatchNorm::convert_sync_batchnorm(model);
  EXPECT_EQ(converted, model) << "a container is converted in place";
  auto s1 = std::dynamic_pointer_cast<nn::SyncBatchNorm>(model->named_children()[1].second);
  auto s2 = std::dynamic_pointer_cast<nn::SyncBatchNorm>(inner->named_children()[0].second);
  ASSERT_TRUE(s1 && s2);
  EXPECT_TRUE(std::dynamic_pointer_cast<nn::Linear>(model->named_children()[0].second) != nullptr);
  EXPECT_EQ(s2->options.eps(), 1e-3);
  EXPECT_EQ(*s2->options.momentum(), 0.2);
  EXPECT_FALSE(s1->is_training());
  EXPECT_TRUE(s2->is_training());
  EXPECT_TRUE(s1->weight.requires_grad());
  EXPECT_FALSE(s1->bias.requires_grad());
  EXPECT_EQ(s1->running_mean.dtype(), kFloat64);
  EXPECT_EQ(max_rel_diff(model->state_dict(), copied), 0.0) << "same keys and values";
  EXPECT_NE(s1->weight.impl(), bn1->weight.impl()) << "copies, not shared tensors";
  // A BatchNorm itself is returned converted; a SyncBatchNorm is kept.
  auto root = nn::SyncBatchNorm::convert_sync_batchnorm(std::make_shared<nn::BatchNorm1d>(5));
  EXPECT_EQ(root->name(), "SyncBatchNorm");
  EXPECT_EQ(nn::SyncBatchNorm::convert_sync_batchnorm(root), root);
}

} // namespace
} // namespace kiln::distributed_test
