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
                         {tensor({0.5f, 1.f, 1.5f}, {3})}, 0.05, 5e-2);
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

}  // namespace
}  // namespace kiln
