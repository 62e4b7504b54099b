// kiln::compile against eager execution: same losses, same gradients.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "compare.h"
#include "tiny_models.h"

namespace kiln {
namespace {
using test_models::expect_close;
using test_models::expect_grads_close;
using test_models::TinyBlock;
using test_models::TinyGPT;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

data::TensorDataset digits() { return data::load_digits(std::string(KILN_SOURCE_DIR) + "/data/digits.csv.gz"); }

/// Trains `steps` AdamW steps on fixed batches and returns the losses.
std::vector<double> train(nn::Module &model, const data::TensorDataset &ds, int steps) {
  optim::AdamW opt(model.parameters(), optim::AdamWOptions(1e-3));
  data::DataLoader loader(ds, 64, /*shuffle=*/true, /*seed=*/3);
  std::vector<double> losses;
  while (static_cast<int>(losses.size()) < steps) {
    for (auto &[x, y] : loader.epoch()) {
      if (static_cast<int>(losses.size()) == steps) break;
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy(model.forward(x), y);
      loss.backward();
      opt.step();
      losses.push_back(loss.item());
    }
  }
  return losses;
}

TEST(Compile, LossesMatchEagerFor50Steps) {
  auto ds = digits();
  auto eager_model = make_mlp(11);
  auto compiled_model = compile(make_mlp(11));
  auto eager = train(*eager_model, ds, 50);
  auto compiled = train(*compiled_model, ds, 50);
  ASSERT_EQ(eager.size(), 50u);
  for (size_t i = 0; i < eager.size(); ++i)
    EXPECT_NEAR(compiled[i], eager[i], 1e-4 * std::abs(eager[i])) << "step " << i;
  EXPECT_LT(eager.back(), eager.front());  // it learned something
  // Batches of 64 plus one ragged last batch: at most two artifacts.
  EXPECT_LE(compiled_model->stats().compiles, 2);
  EXPECT_GE(compiled_model->stats().cache_hits, 45);
}

TEST(Compile, GradientsMatchEager) {
  auto ds = digits();
  Tensor x = data::index_rows(ds.features, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor y = data::index_rows(ds.labels, {0, 1, 2, 3, 4, 5, 6, 7});
  auto eager_model = make_mlp(5);
  auto compiled_model = compile(make_mlp(5));
  for (int call = 0; call < 2; ++call) {  // the trace call and a cached call
    eager_model->zero_grad();
    compiled_model->zero_grad();
    nn::functional::cross_entropy(eager_model->forward(x), y).backward();
    Tensor out = compiled_model->forward(x);
    EXPECT_EQ(out.grad_fn()->name(), "CompiledFunctionBackward");
    nn::functional::cross_entropy(out, y).backward();
    auto pe = eager_model->named_parameters(), pc = compiled_model->named_parameters();
    ASSERT_EQ(pe.size(), pc.size());
    for (size_t i = 0; i < pe.size(); ++i) {
      EXPECT_EQ(pc[i].first, "_orig_mod." + pe[i].first);
      auto ge = pe[i].second.grad().to_vector<double>(), gc = pc[i].second.grad().to_vector<double>();
      ASSERT_EQ(ge.size(), gc.size());
      for (size_t k = 0; k < ge.size(); ++k) EXPECT_NEAR(gc[k], ge[k], 1e-5 + 1e-4 * std::abs(ge[k])) << pe[i].first;
    }
  }
}

TEST(Compile, InputGradientAndNoGradInference) {
  auto model = make_mlp(2);
  auto compiled = compile(make_mlp(2));
  manual_seed(9);
  Tensor x = randn({4, 64});
  Tensor xe = x.clone().requires_grad_(), xc = x.clone().requires_grad_();
  model->forward(xe).sum().backward();
  compiled->forward(xc).sum().backward();
  auto ge = xe.grad().to_vector<double>(), gc = xc.grad().to_vector<double>();
  for (size_t k = 0; k < ge.size(); ++k) EXPECT_NEAR(gc[k], ge[k], 1e-5 + 1e-4 * std::abs(ge[k]));
  NoGradGuard no_grad;
  Tensor yc = compiled->forward(x), ye = model->forward(x);
  EXPECT_FALSE(yc.requires_grad());
  auto a = yc.to_vector<double>(), b = ye.to_vector<double>();
  for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-5 + 1e-5 * std::abs(b[k]));
  EXPECT_EQ(compiled->stats().compiles, 2);  // training graph + inference graph
}

TEST(Compile, ArgmaxIsCapturedWithoutAGraphBreak) {
  // argmax was a graph break before issue 13; it is kiln.argmax now.
  struct UsesArgmax : nn::Module {
    Tensor forward(const Tensor &x) override { return (x * 2.0).argmax(1).to(kFloat32) + 1.0; }
    std::string name() const override { return "UsesArgmax"; }
  };
  auto compiled = compile(std::make_shared<UsesArgmax>());
  Tensor x = tensor(std::vector<float>{1, 5, 2, 7, 0, 3}, {2, 3});
  for (int call = 0; call < 2; ++call) {
    Tensor y = compiled->forward(x);
    EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{2.0, 1.0}));
  }
  EXPECT_TRUE(compiled->graph_breaks().empty());
}

TEST(Compile, UncapturableOpBreaksTheGraph) {
  struct UsesItem : nn::Module {
    Tensor forward(const Tensor &x) override { return x * (x.sum().item() > 0 ? 2.0 : 3.0); }
    std::string name() const override { return "UsesItem"; }
  };
  auto compiled = compile(std::make_shared<UsesItem>());
  Tensor x = tensor(std::vector<float>{1, 5, 2, 7, 0, 3}, {2, 3});
  Tensor y = compiled->forward(x);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{2, 10, 4, 14, 0, 6}));
  EXPECT_EQ(compiled->graph_breaks(), std::vector<std::string>{"item"});
}

// ---- transformer block: layer_norm, attention (batched matmul), GELU-tanh ----
// (TinyBlock and TinyGPT are in tiny_models.h)

/// Compiled vs eager: forward output and every parameter gradient, on the
/// trace call and on a cached call with a new input of the same shape.
template <class MakeModel>
void check_compiled_matches_eager(MakeModel make, const Shape &input_shape, double rtol, double atol) {
  auto eager_model = make();
  auto compiled_model = compile(make());
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(call == 0 ? "trace call" : "cached call");
    manual_seed(100 + call);
    Tensor x = randn(input_shape);
    Tensor r = randn(input_shape);  // d loss / d output
    eager_model->zero_grad();
    compiled_model->zero_grad();
    Tensor ye = eager_model->forward(x);
    (ye * r).sum().backward();
    Tensor yc = compiled_model->forward(x);
    ASSERT_TRUE(yc.grad_fn());
    EXPECT_EQ(yc.grad_fn()->name(), "CompiledFunctionBackward");
    (yc * r).sum().backward();
    expect_close(yc, ye, rtol, atol, "forward output");
    expect_grads_close(*eager_model, *compiled_model, rtol, atol);
  }
  EXPECT_EQ(compiled_model->stats().compiles, 1);
  EXPECT_EQ(compiled_model->stats().cache_hits, 1);
}

TEST(Compile, GptTrainingLossesMatchEagerFor20Steps) {
  const int64_t V = 12, T = 8, B = 4;
  auto make = [&] {
    manual_seed(77);
    return std::make_shared<TinyGPT>(V, T, 16);
  };
  auto eager = make();
  auto compiled = compile(make());
  optim::AdamW opt_e(eager->parameters(), optim::AdamWOptions(3e-3));
  optim::AdamW opt_c(compiled->parameters(), optim::AdamWOptions(3e-3));
  Generator data_gen(5);
  for (int step = 0; step < 20; ++step) {
    std::vector<int64_t> ids(B * T), targets(B * T);
    for (auto &v : ids) v = data_gen.next4()[0] % V;
    for (size_t i = 0; i < ids.size(); ++i) targets[i] = (ids[i] * 7 + 3) % V;  // a learnable mapping
    Tensor x = tensor(ids, {B, T}), y = tensor(targets, {B * T});
    double losses[2];
    int k = 0;
    for (auto &[model, opt] : std::vector<std::pair<nn::Module *, optim::Optimizer *>>{{eager.get(), &opt_e},
                                                                                        {compiled.get(), &opt_c}}) {
      opt->zero_grad();
      Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      opt->step();
      losses[k++] = loss.item();
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-4 * std::abs(losses[0])) << "step " << step;
  }
  EXPECT_EQ(compiled->stats().compiles, 1);
}

TEST(Compile, TransformerBlockMatchesEager) {
  check_compiled_matches_eager(
      [] {
        manual_seed(21);
        return std::make_shared<TinyBlock>(16, 2);
      },
      Shape{2, 8, 16}, 1e-4, 1e-5);
}

/// The new pointwise ops, each with a gradient through a parameter.
struct MathOps : nn::Module {
  Tensor w;
  MathOps() { w = register_parameter("w", randn({6}) * 0.5); }
  Tensor forward(const Tensor &x) override {
    Tensor a = x * w;                    // [4, 6]
    Tensor pos = a * a + 0.5;            // > 0 for sqrt/rsqrt/pow 1.5
    return sqrt(pos) + rsqrt(pos) * 0.5 + tanh(a) + abs(a) * 0.25 + sin(a) - cos(a) * 0.5 + pow(a, 3.0) * 0.1 +
           pow(pos, 1.5) * 0.1 + pow(pos, -0.5);
  }
  std::string name() const override { return "MathOps"; }
};

TEST(Compile, PointwiseMathOpsMatchEager) {
  check_compiled_matches_eager(
      [] {
        manual_seed(4);
        return std::make_shared<MathOps>();
      },
      Shape{4, 6}, 1e-4, 1e-5);
}

/// Batched matmul (bmm with a transposed operand) and softmax, traced.
struct Bmm : nn::Module {
  Tensor w;
  Bmm() { w = register_parameter("w", randn({3, 5, 4}) * 0.5); }
  Tensor forward(const Tensor &x) override {  // x: [3, 6, 4]
    Tensor s = bmm(x, w.transpose(1, 2));      // [3, 6, 5]
    return bmm(nn::functional::softmax(s, -1), w);  // [3, 6, 4]
  }
  std::string name() const override { return "Bmm"; }
};

TEST(Compile, BmmMatchesEager) {
  check_compiled_matches_eager(
      [] {
        manual_seed(8);
        return std::make_shared<Bmm>();
      },
      Shape{3, 6, 4}, 1e-4, 1e-5);
}

TEST(Compile, LayerNormTraces) {
  check_compiled_matches_eager(
      [] {
        manual_seed(6);
        return std::make_shared<nn::LayerNorm>(Shape{12});
      },
      Shape{5, 12}, 1e-4, 1e-5);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

/// autograd::announce_gradient from the compiled backward (the seam of
/// DistributedDataParallel's overlap): each parameter's gradient reaches its
/// AccumulateGrad's early_hooks while the compiled backward still runs
/// (before any .grad is written), equal to the gradient .grad then gets.
struct EarlySeen {
  std::vector<size_t> order;        // parameter indices, in announcement order
  std::vector<Tensor> grads;        // copies, by parameter
  std::vector<int> post_calls_then; // post hooks run so far when each announcement came
  /// The graph holds AccumulateGrad nodes only weakly between backwards.
  std::vector<std::shared_ptr<autograd::AccumulateGrad>> accumulators;
};

/// Hooks on every parameter of `model` recording into `seen` (which the hooks
/// reference: it must outlive the backward).
void watch(nn::Module &model, int &post_calls, EarlySeen &seen, bool early = true) {
  auto params = model.parameters();
  seen.grads.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    auto acc = autograd::grad_accumulator(params[i]);
    seen.accumulators.push_back(acc);
    acc->post_hooks.push_back([&post_calls](const Tensor &) { ++post_calls; });
    if (early)
      acc->early_hooks.push_back([&seen, &post_calls, i](const Tensor &g) {
        seen.order.push_back(i);
        seen.grads[i] = g.clone();
        seen.post_calls_then.push_back(post_calls);
      });
  }
}

/// The CompileAnnounce tests' setup: make_mlp(5), its parameters, a batch
/// x [16, 64] with class labels y [16], and watch() hooks on every
/// parameter counting AccumulateGrad post hooks and recording what is
/// announced early.
class CompileAnnounce : public ::testing::Test {
protected:
  void SetUp() override {
    mlp = make_mlp(5);
    params = mlp->parameters();
    manual_seed(9);
    x = randn({16, 64});
    y = remainder(arange(16) * 7, full({}, 10.0, kInt64));
    watch(*mlp, post_calls, seen);
  }
  /// The cross-entropy loss of `model` on the batch.
  Tensor loss(nn::Module &model) const { return nn::functional::cross_entropy(model.forward(x), y); }

  std::shared_ptr<nn::Module> mlp;
  std::vector<Tensor> params;
  Tensor x, y;
  int post_calls = 0;
  EarlySeen seen;
};

TEST_F(CompileAnnounce, EachParameterGradientIsAnnouncedBeforeTheCompiledBackwardReturns) {
  auto compiled = kiln::compile(mlp);
  loss(*compiled).backward();
  ASSERT_EQ(seen.order.size(), params.size()) << "every parameter announced once";
  for (int before : seen.post_calls_then) EXPECT_EQ(before, 0) << "announced before any AccumulateGrad ran";
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(seen.grads[i].defined()) << i;
    EXPECT_EQ(seen.grads[i].to_vector<float>(), params[i].grad().to_vector<float>()) << "parameter " << i;
  }
  EXPECT_EQ(post_calls, static_cast<int>(params.size()));
}

TEST_F(CompileAnnounce, NotWhenTheParameterGetsAnotherGradientOrHasALeafHook) {
  auto compiled = kiln::compile(mlp);
  // params[0] also feeds the loss outside the compiled graph: its gradient
  // is a sum the compiled backward alone cannot announce. params[1] has a
  // leaf hook that may change it.
  params[1].register_hook([](const Tensor &g) { return g * 2.0; });
  (loss(*compiled) + params[0].sum() * 0.5).backward();
  std::set<size_t> announced(seen.order.begin(), seen.order.end());
  EXPECT_FALSE(announced.count(0));
  EXPECT_FALSE(announced.count(1));
  EXPECT_EQ(announced.size(), params.size() - 2);
  EXPECT_EQ(post_calls, static_cast<int>(params.size()));
}

TEST_F(CompileAnnounce, EagerBackwardAndGradAnnounceNothing) {
  loss(*mlp).backward();
  EXPECT_TRUE(seen.order.empty());
  auto compiled = kiln::compile(mlp);
  autograd::grad({loss(*compiled)}, {ones({})}, params);
  EXPECT_TRUE(seen.order.empty()) << "grad() writes no .grad: nothing to reduce early";
}

}  // namespace
}  // namespace kiln
