// Gradients of every op against finite differences, and autograd semantics.
#include "gradcheck.h"

namespace kiln {
namespace {

using testing::expect_gradients_match;
using testing::values;
using TL = std::vector<Tensor>;

Tensor positive(const Shape &s) { return uniform(s, 0.5, 2.0); }

class GradCheck : public ::testing::Test {
protected:
  void SetUp() override { manual_seed(7); }
};

TEST_F(GradCheck, Add) { expect_gradients_match([](const TL &x) { return x[0] + x[1]; }, {randn({3, 4}), randn({3, 4})}); }
TEST_F(GradCheck, AddBroadcast) { expect_gradients_match([](const TL &x) { return x[0] + x[1]; }, {randn({3, 4}), randn({4})}); }
TEST_F(GradCheck, SubBroadcastBothSides) {
  expect_gradients_match([](const TL &x) { return x[0] - x[1]; }, {randn({3, 1}), randn({1, 4})});
}
TEST_F(GradCheck, Mul) { expect_gradients_match([](const TL &x) { return x[0] * x[1]; }, {randn({2, 5}), randn({2, 5})}); }
TEST_F(GradCheck, Div) { expect_gradients_match([](const TL &x) { return x[0] / x[1]; }, {randn({2, 5}), positive({5})}); }
TEST_F(GradCheck, ScalarOps) {
  expect_gradients_match([](const TL &x) { return (x[0] * 3.0 - 1.0) / 2.0 + 0.5; }, {randn({4})});
}
TEST_F(GradCheck, Neg) { expect_gradients_match([](const TL &x) { return -x[0]; }, {randn({6})}); }
TEST_F(GradCheck, Exp) { expect_gradients_match([](const TL &x) { return exp(x[0]); }, {randn({3, 3})}); }
TEST_F(GradCheck, Log) { expect_gradients_match([](const TL &x) { return log(x[0]); }, {positive({3, 3})}); }
TEST_F(GradCheck, Relu) {
  // Keep inputs away from the kink at 0, where the derivative is undefined.
  Tensor x = tensor({-2.f, -0.5f, 0.3f, 1.5f, -1.f, 2.f}, {2, 3});
  expect_gradients_match([](const TL &v) { return relu(v[0]); }, {x});
}
TEST_F(GradCheck, Pow) { expect_gradients_match([](const TL &x) { return pow(x[0], 3.0); }, {positive({5})}); }
TEST_F(GradCheck, Sqrt) { expect_gradients_match([](const TL &x) { return sqrt(x[0]); }, {positive({5})}); }
TEST_F(GradCheck, Maximum) {
  expect_gradients_match([](const TL &x) { return maximum(x[0], x[1]); },
                         {tensor({1.f, -2.f, 3.f}, {3}), tensor({0.f, 1.f, 5.f}, {3})});
}
TEST_F(GradCheck, Where) {
  Tensor cond = gt(tensor({1.f, -1.f, 2.f, -3.f}, {4}), zeros({}));
  expect_gradients_match([cond](const TL &x) { return where(cond, x[0], x[1]); }, {randn({4}), randn({4})});
}
TEST_F(GradCheck, Matmul) { expect_gradients_match([](const TL &x) { return matmul(x[0], x[1]); }, {randn({3, 4}), randn({4, 2})}); }
TEST_F(GradCheck, MatmulTransposedOperands) {
  expect_gradients_match([](const TL &x) { return matmul(x[0].t(), x[1].t()); }, {randn({4, 3}), randn({2, 4})});
}
TEST_F(GradCheck, MatmulVector) { expect_gradients_match([](const TL &x) { return matmul(x[0], x[1]); }, {randn({3, 4}), randn({4})}); }
TEST_F(GradCheck, SumAll) { expect_gradients_match([](const TL &x) { return x[0].sum(); }, {randn({3, 4})}); }
TEST_F(GradCheck, SumDims) { expect_gradients_match([](const TL &x) { return x[0].sum({0, 2}); }, {randn({2, 3, 4})}); }
TEST_F(GradCheck, SumKeepdim) { expect_gradients_match([](const TL &x) { return x[0].sum({1}, true); }, {randn({2, 3, 4})}); }
TEST_F(GradCheck, Mean) { expect_gradients_match([](const TL &x) { return x[0].mean({-1}); }, {randn({3, 5})}); }
TEST_F(GradCheck, Amax) { expect_gradients_match([](const TL &x) { return x[0].amax({1}); }, {randn({3, 5})}); }
TEST_F(GradCheck, AmaxKeepdimAll) { expect_gradients_match([](const TL &x) { return x[0].amax({}, true); }, {randn({2, 3})}); }
TEST_F(GradCheck, View) { expect_gradients_match([](const TL &x) { return x[0].view({4, 3}) * 2.0; }, {randn({3, 4})}); }
TEST_F(GradCheck, ReshapeOfTranspose) {
  expect_gradients_match([](const TL &x) { return x[0].t().reshape({12}); }, {randn({3, 4})});
}
TEST_F(GradCheck, Permute) { expect_gradients_match([](const TL &x) { return x[0].permute({2, 0, 1}); }, {randn({2, 3, 4})}); }
TEST_F(GradCheck, Expand) { expect_gradients_match([](const TL &x) { return x[0].expand({4, 3, 2}); }, {randn({3, 1})}); }
TEST_F(GradCheck, Narrow) { expect_gradients_match([](const TL &x) { return x[0].narrow(1, 1, 2); }, {randn({3, 4})}); }
TEST_F(GradCheck, Slice) { expect_gradients_match([](const TL &x) { return x[0].slice(0, -2, 100); }, {randn({4, 2})}); }
TEST_F(GradCheck, UnsqueezeSqueezeFlatten) {
  expect_gradients_match([](const TL &x) { return x[0].unsqueeze(1).squeeze(1).flatten(); }, {randn({2, 3})});
}
TEST_F(GradCheck, ContiguousAndClone) {
  expect_gradients_match([](const TL &x) { return x[0].t().contiguous().clone(); }, {randn({2, 3})});
}
TEST_F(GradCheck, ToHalfAndBack) {
  // A rounding step has derivative 1 almost everywhere; a wide eps (0.05,
  // against a float16 spacing <= 2^-9 here) averages over the rounding.
  expect_gradients_match([](const TL &x) { return x[0].to(kFloat16).to(kFloat32) * 1.0; },
                         {tensor({0.5f, 1.f, 1.5f}, {3})}, 0.05, 5e-2, /*in_float64=*/false);
}
TEST_F(GradCheck, Float32PathAgreesToo) {
  expect_gradients_match([](const TL &x) { return log(x[0]) * x[1]; }, {positive({4}), randn({4})}, 1e-3, 1e-2,
                         /*in_float64=*/false);
}
TEST_F(GradCheck, LogSoftmax) {
  expect_gradients_match([](const TL &x) { return nn::functional::log_softmax(x[0], 1); }, {randn({3, 5})});
}
TEST_F(GradCheck, CrossEntropy) {
  Tensor target = tensor(std::vector<int64_t>{1, 0, 4}, {3});
  expect_gradients_match([target](const TL &x) { return nn::functional::cross_entropy(x[0], target); }, {randn({3, 5})});
}
TEST_F(GradCheck, Linear) {
  expect_gradients_match([](const TL &x) { return nn::functional::linear(x[0], x[1], x[2]); },
                         {randn({4, 3}), randn({2, 3}), randn({2})});
}

// ---- semantics -------------------------------------------------------------------

TEST(Autograd, AccumulatesAcrossBackwardCalls) {
  Tensor x = tensor({1.f, 2.f}, {2}).requires_grad_();
  (x * 3.0).sum().backward();
  (x * x).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{3 + 2, 3 + 4}));
}

TEST(Autograd, TensorUsedTwiceSumsGradients) {
  Tensor x = tensor({2.f}, {1}).requires_grad_();
  Tensor y = x * x + x;  // dy/dx = 2x + 1 = 5
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{5}));
}

TEST(Autograd, ZeroGradClears) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  lin->forward(ones({1, 3})).sum().backward();
  ASSERT_TRUE(lin->weight.grad().defined());
  lin->zero_grad();
  EXPECT_FALSE(lin->weight.grad().defined());
  lin->forward(ones({1, 3})).sum().backward();
  lin->zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(values(lin->weight.grad()), std::vector<double>(6, 0.0));
}

TEST(Autograd, DetachStopsGradient) {
  Tensor x = tensor({1.f, 2.f}, {2}).requires_grad_();
  Tensor y = x.detach() * x;  // only the second factor carries gradient
  EXPECT_FALSE(x.detach().requires_grad());
  y.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 2}));
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, GradDoesNotTouchDotGrad) {
  Tensor x = tensor({3.f}, {1}).requires_grad_();
  auto g = autograd::grad({x * x}, {ones({1})}, {x});
  EXPECT_EQ(values(g[0]), (std::vector<double>{6}));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, GradFnNames) {
  Tensor x = ones({2}).requires_grad_();
  EXPECT_EQ((x + x).grad_fn()->name(), "AddBackward");
  EXPECT_EQ(x.exp().grad_fn()->name(), "ExpBackward");
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.exp().is_leaf());
}

TEST(Autograd, SecondBackwardThroughFreedGraphThrows) {
  Tensor x = tensor({2.f}, {1}).requires_grad_();
  Tensor y = (x.exp() * x).sum();
  y.backward();
  try {
    y.backward();
    FAIL() << "expected kiln::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Autograd, RetainGraphAllowsSecondBackward) {
  Tensor x = tensor({2.f}, {1}).requires_grad_();
  Tensor y = (x * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{8}));  // 2 * 2x
}

TEST(Autograd, InplaceModificationOfSavedTensorThrows) {
  Tensor x = tensor({1.f, 2.f}, {2}).requires_grad_();
  Tensor a = x * 1.0;  // non-leaf
  Tensor y = (a * a).sum();  // saves a
  {
    NoGradGuard g;
    a.detach().mul_(2.0);  // writes a's storage through a view
  }
  try {
    y.backward();
    FAIL() << "expected kiln::Error";
  } catch (const Error &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("modified by an inplace operation"), std::string::npos) << msg;
    EXPECT_NE(msg.find("MulBackward"), std::string::npos) << msg;
    EXPECT_NE(msg.find("version 1; expected version 0"), std::string::npos) << msg;
  }
}

TEST(Autograd, VersionCounterCountsInPlaceWrites) {
  Tensor x = zeros({3});
  EXPECT_EQ(x._version(), 0u);
  x.add_(ones({3}));
  x.view({3, 1}).mul_(2.0);  // views share the counter
  EXPECT_EQ(x._version(), 2u);
}

TEST(Autograd, HooksOnLeafAndNonLeaf) {
  Tensor x = tensor({1.f, 2.f}, {2}).requires_grad_();
  Tensor h = x * 3.0;
  std::vector<double> seen;
  h.register_hook([&](const Tensor &g) {
    seen = values(g);
    return g * 10.0;  // replaces the gradient flowing further
  });
  x.register_hook([](const Tensor &g) { return g + 1.0; });
  int post_calls = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor &p) {
    ++post_calls;
    EXPECT_TRUE(p.grad().defined());
  });
  h.sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{31, 31}));  // 1*10*3 + 1
  EXPECT_EQ(post_calls, 1);
  EXPECT_THROW(ones({1}).register_hook([](const Tensor &g) { return g; }), Error);
}

TEST(Autograd, CheckpointRecomputesAndMatchesPlainGradients) {
  manual_seed(3);
  auto lin = std::make_shared<nn::Linear>(4, 3);
  Tensor x = randn({2, 4});
  auto fn = [&](const TL &in) { return relu(lin->forward(in[0])).exp(); };
  Tensor xa = x.clone().requires_grad_(), xb = x.clone().requires_grad_();
  fn({xa}).sum().backward();
  std::vector<double> wa = values(lin->weight.grad()), gxa = values(xa.grad());
  lin->zero_grad();
  int calls = 0;
  Tensor out = autograd::checkpoint([&](const TL &in) { ++calls; return fn(in); }, {xb});
  EXPECT_EQ(calls, 1);
  out.sum().backward();
  EXPECT_EQ(calls, 2);  // recomputed in backward
  EXPECT_EQ(values(lin->weight.grad()), wa);
  EXPECT_EQ(values(xb.grad()), gxa);
}

TEST(Autograd, CheckpointReplaysRandomDraws) {
  Tensor x = ones({5}).requires_grad_();
  std::vector<double> forward_noise, backward_noise;
  int calls = 0;
  Tensor out = autograd::checkpoint(
      [&](const TL &in) {
        Tensor noise = rand({5});
        (calls++ == 0 ? forward_noise : backward_noise) = values(noise);
        return in[0] * noise;
      },
      {x});
  rand({7});  // the generator moves on between forward and backward
  out.sum().backward();
  EXPECT_EQ(forward_noise, backward_noise);
  EXPECT_EQ(values(x.grad()), forward_noise);
}

}  // namespace
}  // namespace kiln
