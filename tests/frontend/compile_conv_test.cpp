// Compiled CNNs (issue 13): conv2d, its gradients and max pooling are kiln
// dialect ops that run as extern (oneDNN) steps, so a CNN compiles without
// graph breaks; compiled training equals eager training. Expected values
// come from eager execution of the same module.
#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "compare.h"

namespace kiln {
namespace {
using test_models::expect_close;
using test_models::expect_grads_close;
namespace F = nn::functional;

/// conv-(BN)-ReLU, conv-(BN) + the block's input (a residual), ReLU, max
/// pool, a grouped strided conv, avg pools (one padded), linear:
/// [N, 3, 8, 8] -> [N, 10].
struct SmallCnn : nn::Module {
  std::shared_ptr<nn::Conv2d> c1, c2, c3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Linear> fc;
  bool with_bn;
  explicit SmallCnn(bool batch_norm) : with_bn(batch_norm) {
    manual_seed(7);
    c1 = register_module("c1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).padding(1)));
    c2 = register_module("c2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 8, 3).padding(1).bias(!batch_norm)));
    c3 = register_module("c3", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(8, 8, {3, 2}).stride({1, 2}).groups(2)));
    if (batch_norm) {
      bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(8));
      bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(8));
    }
    fc = register_module("fc", std::make_shared<nn::Linear>(8 * 3 * 2, 10));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = c1->forward(x);
    if (with_bn) h = bn1->forward(h);
    h = relu(h);
    Tensor r = c2->forward(h);
    if (with_bn) r = bn2->forward(r);
    r = relu(r + h);                                         // [N, 8, 8, 8]
    Tensor p = F::max_pool2d(r, {2, 2});                     // [N, 8, 4, 4]
    Tensor z = relu(c3->forward(p));                         // grouped, strided: [N, 8, 2, 2]
    Tensor a = F::avg_pool2d(z, {2, 1}, {1, 1}, {1, 0});     // padded: [N, 8, 3, 2]
    Tensor b = F::avg_pool2d(p, {2, 1}, {1, 2});             // [N, 8, 3, 2]
    return fc->forward((a + b).reshape({x.size(0), -1}));
  }
  std::string name() const override { return "SmallCnn"; }
};

/// The same parameter values in both modules (compiled wraps its own copy).
void copy_parameters(nn::Module &from, nn::Module &to) {
  NoGradGuard no_grad;
  auto a = from.named_parameters(), b = to.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) b[i].second.copy_(a[i].second);
}

/// `steps` SGD steps of eager and compiled copies of SmallCnn on the same
/// batches: equal losses, gradients, parameters (and running statistics)
/// at `rtol`; the compiled module reports no graph break.
void expect_training_matches(bool batch_norm, int steps, double rtol) {
  auto eager = std::make_shared<SmallCnn>(batch_norm);
  auto inner = std::make_shared<SmallCnn>(batch_norm);
  copy_parameters(*eager, *inner);
  auto compiled = compile(inner);
  optim::SGD opt_e(eager->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  optim::SGD opt_c(compiled->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    manual_seed(1000 + step);
    Tensor x = randn({4, 3, 8, 8});
    Tensor y = tensor(std::vector<int64_t>{step % 10, (3 * step + 1) % 10, (7 * step + 2) % 10, 9 - step % 10}, {4});
    opt_e.zero_grad();
    opt_c.zero_grad();
    Tensor le = F::cross_entropy(eager->forward(x), y);
    Tensor lc = F::cross_entropy(compiled->forward(x), y);
    expect_close(lc, le, rtol, 1e-6, "loss");
    le.backward();
    lc.backward();
    expect_grads_close(*eager, *compiled, rtol, 1e-6);
    EXPECT_TRUE(compiled->graph_breaks().empty()) << "first graph break: " << compiled->graph_breaks().front();
    opt_e.step();
    opt_c.step();
  }
  auto pe = eager->named_parameters(), pc = compiled->named_parameters();
  for (size_t i = 0; i < pe.size(); ++i) expect_close(pc[i].second, pe[i].second, rtol, 1e-6, pe[i].first);
  auto be = eager->named_buffers(), bc = compiled->named_buffers();
  ASSERT_EQ(be.size(), bc.size());
  for (size_t i = 0; i < be.size(); ++i) expect_close(bc[i].second, be[i].second, rtol, 1e-6, be[i].first);
  EXPECT_EQ(compiled->stats().graph_break_segments, 0);
  EXPECT_EQ(compiled->stats().eager_fallbacks, 0);
  EXPECT_EQ(compiled->stats().compiles, 1);
  EXPECT_EQ(compiled->stats().cache_hits, steps - 1);
}

TEST(CompileConv, CnnTrainsLikeEagerWithoutGraphBreaks) { expect_training_matches(/*batch_norm=*/false, 20, 1e-4); }

// batch_norm in training mode: its running statistics (buffers updated in
// place under no_grad) are functionalized (trace::mutate): after 20
// compiled steps running_mean, running_var and num_batches_tracked equal
// eager's, and nothing breaks the graph.
TEST(CompileConv, CnnWithBatchNormTrainsLikeEagerWithoutGraphBreaks) {
  expect_training_matches(/*batch_norm=*/true, 20, 1e-4);
}

// Eval mode reads the running statistics the compiled training wrote.
TEST(CompileConv, BatchNormEvalAfterCompiledTraining) {
  auto eager = std::make_shared<SmallCnn>(true);
  auto inner = std::make_shared<SmallCnn>(true);
  copy_parameters(*eager, *inner);
  auto compiled = compile(inner);
  for (int step = 0; step < 3; ++step) {
    manual_seed(50 + step);
    Tensor x = randn({4, 3, 8, 8}) * 2.0 + 0.5;
    NoGradGuard no_grad;
    eager->forward(x);
    compiled->forward(x);
  }
  eager->eval();
  compiled->eval();
  manual_seed(60);
  Tensor x = randn({4, 3, 8, 8});
  NoGradGuard no_grad;
  expect_close(compiled->forward(x), eager->forward(x), 1e-4, 1e-6, "eval output");
  EXPECT_TRUE(compiled->graph_breaks().empty());
  EXPECT_EQ(inner->bn1->num_batches_tracked.item(), 3.0);
}

TEST(CompileConv, ForwardAndInputGradientMatchEager) {
  auto eager = std::make_shared<SmallCnn>(false);
  auto inner = std::make_shared<SmallCnn>(false);
  copy_parameters(*eager, *inner);
  auto compiled = compile(inner);
  manual_seed(5);
  Tensor x = randn({2, 3, 8, 8});
  Tensor xe = x.clone().requires_grad_(true), xc = x.clone().requires_grad_(true);
  Tensor ye = eager->forward(xe), yc = compiled->forward(xc);
  expect_close(yc, ye, 1e-5, 1e-6, "output");
  (ye * ye).sum().backward();
  (yc * yc).sum().backward();
  expect_close(xc.grad(), xe.grad(), 1e-4, 1e-6, "input gradient");
  EXPECT_TRUE(compiled->graph_breaks().empty());
}

// Under bfloat16 autocast conv2d is a lower-precision op (its inputs are
// rounded to bfloat16) and the pools keep their input dtype, as PyTorch's
// autocast lists: the compiled CNN (BN included) rounds where eager does.
TEST(CompileConv, AutocastBf16MatchesEagerAutocast) {
  auto eager = std::make_shared<SmallCnn>(true);
  auto inner = std::make_shared<SmallCnn>(true);
  copy_parameters(*eager, *inner);
  auto compiled = compile(inner);
  for (int call = 0; call < 2; ++call) {  // the trace call and a cached call
    SCOPED_TRACE("call " + std::to_string(call));
    manual_seed(70 + call);
    Tensor x = randn({2, 3, 8, 8});
    Tensor ye, yc;
    {
      AutocastGuard autocast(kBFloat16);
      ye = eager->forward(x);
      yc = compiled->forward(x);
    }
    ASSERT_EQ(yc.dtype(), ye.dtype());
    expect_close(yc.to(kFloat32), ye.to(kFloat32), 2e-2, 2e-2, "output");
    (ye.to(kFloat32) * ye.to(kFloat32)).sum().backward();
    (yc.to(kFloat32) * yc.to(kFloat32)).sum().backward();
    expect_grads_close(*eager, *compiled, 5e-2, 5e-2);
    EXPECT_TRUE(compiled->graph_breaks().empty());
    eager->zero_grad();
    compiled->zero_grad();
  }
  EXPECT_EQ(compiled->stats().compiles, 1);
  EXPECT_EQ(compiled->stats().eager_fallbacks, 0);
}

} // namespace
} // namespace kiln
