// kiln::compile with checkpoint rematerialization (CompileOptions::memory_budget,
// the kiln-remat pass): the gradients at budgets 1, 0.5 and 0 equal those of
// the same compiled model without kiln-remat, with dropout on (the masks are
// graph inputs, so recomputation in backward reuses them); no budget plans
// more activation memory than no remat, and 0.5 at most half of budget 1's
// (CompileStats::peak_activation_bytes).
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tiny_models.h"

namespace kiln {
namespace {

/// fc2(dropout(gelu(fc1(x)))): [N, 16] -> [N, 8].
struct DropoutMlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
  DropoutMlp() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(16, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 8));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.25));
  }
  Tensor forward(const Tensor &x) override { return fc2->forward(drop->forward(gelu(fc1->forward(x), "tanh"))); }
  std::string name() const override { return "DropoutMlp"; }
};

/// What one compiled configuration computed: per call, the output, the input
/// gradient and every parameter gradient; and the compile statistics.
struct CompiledRun {
  std::vector<std::vector<Tensor>> calls;
  CompileStats stats;
  std::string report;
};

/// Two calls (the trace call and a cached call) of a freshly made model
/// compiled with `options`, in training mode, each from its own seed: the
/// input, d loss / d output and the dropout masks are the same for every
/// configuration.
template <class MakeModel> CompiledRun run_compiled(MakeModel make, CompileOptions options, const Shape &input_shape) {
  auto model = compile(make(), options);
  model->train();
  CompiledRun run;
  for (int call = 0; call < 2; ++call) {
    manual_seed(500 + call);
    Tensor x = randn(input_shape).requires_grad_(true);
    model->zero_grad();
    Tensor y = model->forward(x);
    Tensor r = randn(y.sizes());
    (y * r).sum().backward();
    std::vector<Tensor> values{y.detach(), x.grad()};
    for (auto &[name, p] : model->named_parameters())
      values.push_back(p.grad());
    run.calls.push_back(values);
    if (call == 0)
      run.report = model->describe(x);
  }
  run.stats = model->stats();
  return run;
}

/// |got - want| <= 1e-6 |want| element-wise (f32; recomputation repeats the
/// same float ops, so the results agree to rounding at most).
void expect_same(const CompiledRun &got, const CompiledRun &want, const std::string &what) {
  ASSERT_EQ(got.calls.size(), want.calls.size());
  for (size_t c = 0; c < want.calls.size(); ++c)
    for (size_t i = 0; i < want.calls[c].size(); ++i) {
      ASSERT_TRUE(got.calls[c][i].defined()) << what << " call " << c << " value " << i;
      auto g = got.calls[c][i].to_vector<double>(), w = want.calls[c][i].to_vector<double>();
      ASSERT_EQ(g.size(), w.size());
      for (size_t k = 0; k < w.size(); ++k)
        ASSERT_NEAR(g[k], w[k], 1e-6 * std::abs(w[k]) + 1e-30)
            << what << ", call " << c << ", value " << i << " (0 output, 1 input grad, then parameter grads) [" << k
            << "]";
    }
}

/// The model compiled without kiln-remat (the reference), with dropout on.
template <class MakeModel> CompiledRun run_without_remat(MakeModel make, const Shape &input_shape) {
  CompileOptions off;
  off.remat = false;
  CompiledRun reference = run_compiled(make, off, input_shape);
  EXPECT_NE(reference.report.find("rematerialization: off"), std::string::npos) << reference.report;
  EXPECT_EQ(reference.report.find("dropout masks): 0"), std::string::npos) << "dropout is not on\n" << reference.report;
  return reference;
}

/// The model at `budget`: same values as `reference`, and never more
/// planned memory than without rematerialization.
template <class MakeModel>
CompiledRun run_at_budget(MakeModel make, const Shape &input_shape, double budget, const CompiledRun &reference) {
  SCOPED_TRACE("memory_budget " + std::to_string(budget));
  CompileOptions options;
  options.memory_budget = budget;
  CompiledRun run = run_compiled(make, options, input_shape);
  expect_same(run, reference, "budget " + std::to_string(budget));
  EXPECT_EQ(run.stats.compiles, 1);
  EXPECT_LE(run.stats.peak_activation_bytes(), reference.stats.peak_activation_bytes());
  if (budget == 0.0) {
    EXPECT_EQ(run.stats.saved_bytes, 0);
    EXPECT_NE(run.report.find("kiln.matmul x"), std::string::npos) << run.report;
  }
  EXPECT_NE(run.report.find("rematerialization: memory budget"), std::string::npos) << run.report;
  if (budget > 0.0 && budget < 1.0)
    EXPECT_NE(run.report.find("estimated peak activation memory: "), std::string::npos) << run.report;
  return run;
}

auto make_mlp = [] {
  manual_seed(3);
  return std::make_shared<DropoutMlp>();
};
const Shape kMlpInput{6, 16};

TEST(CompileRemat, MlpGradientsMatchWithoutRemat) {
  const CompiledRun reference = run_without_remat(make_mlp, kMlpInput);
  const CompiledRun b1 = run_at_budget(make_mlp, kMlpInput, 1.0, reference);
  const CompiledRun b05 = run_at_budget(make_mlp, kMlpInput, 0.5, reference);
  const CompiledRun b0 = run_at_budget(make_mlp, kMlpInput, 0.0, reference);
  // Budget 1 saves something (the fc1 matmul result) and recomputes the
  // pointwise GELU; budget 0.5 keeps the planned peak within half of
  // budget 1's, and less memory costs more recomputation (the matmul).
  EXPECT_GT(b1.stats.saved_bytes, 0);
  EXPECT_LE(b05.stats.peak_activation_bytes(), b1.stats.peak_activation_bytes() / 2);
  EXPECT_GT(b1.stats.recompute_flops, 0);
  EXPECT_GE(b05.stats.recompute_flops, b1.stats.recompute_flops);
  EXPECT_GE(b0.stats.recompute_flops, b05.stats.recompute_flops);
  EXPECT_GT(b0.stats.recompute_flops, b1.stats.recompute_flops);
}

// The block: one test per budget (each compile of the block is a few
// seconds cold; the reference comes from the kernel cache after the first).
auto make_block = [] {
  manual_seed(21);
  return std::make_shared<test_models::TinyBlock>(16, 2, /*dropout=*/0.2, /*attn_dropout=*/0.1);
};
const Shape kBlockInput{2, 8, 16};

TEST(CompileRemat, TransformerBlockBudget1MatchesWithoutRemat) {
  const CompiledRun reference = run_without_remat(make_block, kBlockInput);
  const CompiledRun run = run_at_budget(make_block, kBlockInput, 1.0, reference);
  EXPECT_GT(run.stats.saved_bytes, 0);
  EXPECT_LT(run.stats.saved_bytes, reference.stats.saved_bytes); // the min-cut recomputes pointwise ops
}

TEST(CompileRemat, TransformerBlockBudgetHalfMatchesWithoutRemat) {
  const CompiledRun reference = run_without_remat(make_block, kBlockInput);
  const CompiledRun run = run_at_budget(make_block, kBlockInput, 0.5, reference);
  EXPECT_NE(run.report.find("kiln.matmul x"), std::string::npos) << run.report;
}

TEST(CompileRemat, TransformerBlockBudget0MatchesWithoutRemat) {
  const CompiledRun reference = run_without_remat(make_block, kBlockInput);
  run_at_budget(make_block, kBlockInput, 0.0, reference);
}

// Large enough (MLP hidden and attention scores of 256 KiB) that budget 0
// recomputes values again before far uses (kiln-partition's per-use
// recomputation, recompute-min-bytes = 256 KiB; the GELU's exp is cloned
// twice, as KILN_DUMP_IR shows): same gradients as without remat.
TEST(CompileRemat, TransformerBlockPerUseRecomputeMatchesWithoutRemat) {
  auto make_wide_block = [] {
    manual_seed(22);
    return std::make_shared<test_models::TinyBlock>(64, 2, /*dropout=*/0.2, /*attn_dropout=*/0.1);
  };
  const Shape input{2, 128, 64};
  const CompiledRun reference = run_without_remat(make_wide_block, input);
  const CompiledRun b0 = run_at_budget(make_wide_block, input, 0.0, reference);
  EXPECT_NE(b0.report.find("kiln.matmul x"), std::string::npos) << b0.report;
}

// The last backward (no retain_graph) donates the saved activations to the
// compiled backward, which reuses their memory after their last read
// (LaunchExecutable::run_donating): same gradients as a backward that keeps
// them (retain_graph, the plain plan), in less memory; with kiln-remat and
// without it (which saves more, views of activations among them).
void expect_donation_saves_memory(const CompileOptions &options) {
  auto model = compile(make_block(), options);
  model->eval();  // no dropout: both backward calls see the same graph
  manual_seed(7);
  Tensor x = randn(kBlockInput).requires_grad_(true);
  Tensor y = model->forward(x);
  Tensor loss = (y * randn(y.sizes())).sum();
  auto &alloc = runtime::cpu_allocator();
  auto grads = [&] {
    std::vector<std::vector<double>> out{x.grad().to_vector<double>()};
    for (auto &[name, p] : model->named_parameters()) out.push_back(p.grad().to_vector<double>());
    x.set_grad(Tensor());
    model->zero_grad();
    return out;
  };
  alloc.reset_peak_stats();
  int64_t base = alloc.stats().current_bytes;
  loss.backward(Tensor(), /*retain_graph=*/true);
  const int64_t kept_peak = alloc.stats().peak_bytes - base;
  const auto kept = grads();
  alloc.reset_peak_stats();
  base = alloc.stats().current_bytes;
  loss.backward();
  const int64_t donated_peak = alloc.stats().peak_bytes - base;
  const auto donated = grads();
  ASSERT_EQ(kept.size(), donated.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    ASSERT_EQ(kept[i].size(), donated[i].size());
    for (size_t k = 0; k < kept[i].size(); ++k) ASSERT_EQ(kept[i][k], donated[i][k]) << "gradient " << i << "[" << k << "]";
  }
  EXPECT_LT(donated_peak, kept_peak);
  const std::string report = explain(*model, x, /*print=*/false);
  EXPECT_NE(report.find("with the saved activations donated"), std::string::npos) << report;
}

TEST(CompileRemat, DonatedSavedActivationsGiveTheSameGradientsInLessMemory) {
  CompileOptions options;
  options.memory_budget = 1.0;
  expect_donation_saves_memory(options);
  options.remat = false;
  expect_donation_saves_memory(options);
}

TEST(CompileRemat, BudgetOutsideZeroOneIsAnError) {
  for (double budget : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    CompileOptions options;
    options.memory_budget = budget;
    try {
      compile(std::make_shared<DropoutMlp>(), options);
      FAIL() << "expected kiln::Error for memory_budget " << budget;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("memory_budget"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("outside [0, 1]"), std::string::npos) << e.what();
    }
  }
}

} // namespace
} // namespace kiln
