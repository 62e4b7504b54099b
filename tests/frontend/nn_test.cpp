// Modules and optimizers (closed-form steps). The digits data and loader
// tests live in data_test.cpp.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

std::vector<double> v(const Tensor &t) { return t.to_vector<double>(); }

struct Block : nn::Module {
  Block() {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 3));
    register_module("act", act);
    scale = register_parameter("scale", ones({3}));
  }
  Tensor forward(const Tensor &x) override { return act.forward(fc->forward(x)) * scale; }
  std::string name() const override { return "Block"; }
  std::shared_ptr<nn::Linear> fc;
  nn::ReLU act;  // held by value
  Tensor scale;
};

TEST(Module, NamedParametersAreDotted) {
  auto model = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<Block>(), std::make_shared<nn::Linear>(3, 2)});
  std::vector<std::string> names;
  for (auto &[n, p] : model->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.scale", "0.fc.weight", "0.fc.bias", "1.weight", "1.bias"}));
  EXPECT_EQ(model->parameters().size(), 5u);
  EXPECT_EQ(model->forward(ones({2, 4})).sizes(), (Shape{2, 2}));
}

TEST(Module, TrainEvalAndApply) {
  auto model = std::make_shared<Block>();
  model->eval();
  EXPECT_FALSE(model->is_training());
  EXPECT_FALSE(model->fc->is_training());
  model->train();
  EXPECT_TRUE(model->fc->is_training());
  int count = 0;
  model->apply([&](nn::Module &) { ++count; });
  EXPECT_EQ(count, 3);  // fc, act, block
}

TEST(Module, LinearInitBoundsLikePyTorch) {
  manual_seed(0);
  nn::Linear lin(64, 128);
  const double bound = 1.0 / 8.0;
  for (double w : v(lin.weight)) EXPECT_LE(std::abs(w), bound);
  for (double b : v(lin.bias)) EXPECT_LE(std::abs(b), bound);
  // Uniform(-b, b) has variance b^2/3.
  Tensor w = lin.weight;
  EXPECT_NEAR((w * w).mean().item(), bound * bound / 3, bound * bound / 3 * 0.1);
  EXPECT_TRUE(lin.weight.requires_grad());
}

TEST(Optim, SGDMomentumMatchesClosedForm) {
  Tensor p = tensor({1.f}, {1}).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions(0.1).momentum(0.9));
  // loss = p^2 / 2 -> grad = p. Reference recurrence written out by hand.
  double ref = 1.0, buf = 0.0;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    (p * p * 0.5).sum().backward();
    opt.step();
    buf = step == 0 ? ref : 0.9 * buf + ref;
    ref -= 0.1 * buf;
    EXPECT_NEAR(v(p)[0], ref, 1e-6);
  }
}

TEST(Optim, AdamWFirstStepIsLrTimesSign) {
  // After one step m_hat = g and v_hat = g^2, so the update is lr*g/(|g|+eps)
  // plus the decoupled decay p *= 1 - lr*wd.
  Tensor p = tensor({2.f, -3.f}, {2}).requires_grad_();
  optim::AdamW opt({p}, optim::AdamWOptions(0.1).weight_decay(0.5));
  (p * tensor({4.f, -1.f}, {2})).sum().backward();
  opt.step();
  EXPECT_NEAR(v(p)[0], 2.0 * (1 - 0.05) - 0.1, 1e-6);
  EXPECT_NEAR(v(p)[1], -3.0 * (1 - 0.05) + 0.1, 1e-6);
}

TEST(Optim, ClipGradNormReturnsTotalNorm) {
  Tensor a = ones({2}).requires_grad_(), b = ones({1}).requires_grad_();
  ((a * 3.0).sum() + (b * 4.0).sum()).backward();  // grads 3,3,4 -> norm sqrt(34)
  double n = nn::utils::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(n, std::sqrt(34.0), 1e-6);
  double after = std::sqrt(std::pow(v(a.grad())[0], 2) * 2 + std::pow(v(b.grad())[0], 2));
  EXPECT_NEAR(after, 1.0, 1e-5);
}

}  // namespace
}  // namespace kiln
