// Forward values of ops against closed forms and hand-computed results.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

std::vector<double> values(const Tensor &t) { return t.to_vector<double>(); }
std::vector<double> v(const Tensor &t) { return t.to_vector<double>(); }

TEST(Ops, ArithmeticWithBroadcast) {
  Tensor a = tensor({1.f, 2.f, 3.f}, {3, 1});
  Tensor b = tensor({10.f, 20.f}, {2});
  EXPECT_EQ((a + b).sizes(), (Shape{3, 2}));
  EXPECT_EQ(v(a + b), (std::vector<double>{11, 21, 12, 22, 13, 23}));
  EXPECT_EQ(v(b - a), (std::vector<double>{9, 19, 8, 18, 7, 17}));
  EXPECT_EQ(v(a * b), (std::vector<double>{10, 20, 20, 40, 30, 60}));
  EXPECT_EQ(v(b / 4.0), (std::vector<double>{2.5, 5}));
  EXPECT_EQ(v(-b), (std::vector<double>{-10, -20}));
}

TEST(Ops, IntegerArithmeticAndPromotion) {
  Tensor i = tensor(std::vector<int64_t>{1, 2, 3}, {3});
  EXPECT_EQ((i + i).dtype(), kInt64);
  EXPECT_EQ(v(i * 2.0), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ((i * 2.0).dtype(), kInt64);
  EXPECT_EQ((i * 0.5).dtype(), kFloat32);
  EXPECT_EQ((i / i).dtype(), kFloat32);  // true division
  EXPECT_EQ((i + ones({3})).dtype(), kFloat32);
}

TEST(Ops, UnaryMath) {
  Tensor x = tensor({-1.f, 0.f, 2.f}, {3});
  auto e = v(exp(x));
  EXPECT_NEAR(e[0], std::exp(-1.0), 1e-6);
  EXPECT_NEAR(e[2], std::exp(2.0), 1e-5);
  EXPECT_EQ(v(relu(x)), (std::vector<double>{0, 0, 2}));
  auto l = v(log(tensor({1.f, 2.f}, {2})));
  EXPECT_NEAR(l[1], std::log(2.0), 1e-7);
  EXPECT_TRUE(std::isinf(v(log(zeros({1})))[0]));
  EXPECT_NEAR(v(pow(tensor({3.f}, {1}), 2.0))[0], 9.0, 1e-6);
  EXPECT_NEAR(v(sqrt(tensor({16.f}, {1})))[0], 4.0, 1e-6);
}

TEST(Ops, ComparisonsAndWhere) {
  Tensor a = tensor({1.f, 2.f, 3.f}, {3});
  Tensor b = tensor({2.f, 2.f, 2.f}, {3});
  EXPECT_EQ(v(gt(a, b)), (std::vector<double>{0, 0, 1}));
  EXPECT_EQ(v(ge(a, b)), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(v(lt(a, b)), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(v(le(a, b)), (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(v(eq(a, b)), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(v(ne(a, b)), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(gt(a, b).dtype(), kBool);
  EXPECT_EQ(v(where(gt(a, b), a, zeros({}))), (std::vector<double>{0, 0, 3}));
  EXPECT_EQ(v(maximum(a, b)), (std::vector<double>{2, 2, 3}));
}

TEST(Ops, Reductions) {
  Tensor x = tensor({1.f, 5.f, 3.f, 4.f, 2.f, 6.f}, {2, 3});
  EXPECT_EQ(v(x.sum()), (std::vector<double>{21}));
  EXPECT_EQ(v(x.sum({0})), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(v(x.sum({1})), (std::vector<double>{9, 12}));
  EXPECT_EQ(x.sum({1}, true).sizes(), (Shape{2, 1}));
  EXPECT_EQ(v(x.mean({1})), (std::vector<double>{3, 4}));
  EXPECT_EQ(v(x.amax({1})), (std::vector<double>{5, 6}));
  EXPECT_EQ(v(x.amax({0})), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(v(x.argmax(1)), (std::vector<double>{1, 2}));
  EXPECT_EQ(x.argmax(1).dtype(), kInt64);
  EXPECT_EQ(v(x.argmax(0, true)), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(v(x.t().sum({1})), (std::vector<double>{5, 7, 9}));  // strided input
  EXPECT_EQ(v(tensor(std::vector<int64_t>{1, 2}, {2}).sum()), (std::vector<double>{3}));
}

TEST(Ops, MatmulMatchesNaive) {
  manual_seed(5);
  Tensor a = randn({7, 5}), b = randn({5, 3});
  auto av = v(a), bv = v(b), cv = v(matmul(a, b));
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = 0;
      for (int k = 0; k < 5; ++k) s += av[i * 5 + k] * bv[k * 3 + j];
      EXPECT_NEAR(cv[i * 3 + j], s, 1e-5);
    }
  // Transposed views multiply without copies and give the same numbers.
  auto ct = v(matmul(b.t(), a.t()));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 7; ++j) EXPECT_NEAR(ct[i * 7 + j], cv[j * 3 + i], 1e-5);
  EXPECT_EQ(matmul(a, randn({5})).sizes(), (Shape{7}));
}

TEST(Ops, LogSoftmaxAndCrossEntropy) {
  Tensor x = tensor({1.f, 2.f, 3.f, 1000.f, 0.f, -1000.f}, {2, 3});
  auto ls = v(nn::functional::log_softmax(x, 1));
  double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(ls[0], 1 - lse, 1e-6);
  EXPECT_NEAR(ls[2], 3 - lse, 1e-6);
  EXPECT_NEAR(ls[3], 0.0, 1e-6);  // stable for large logits
  EXPECT_NEAR(ls[4], -1000.0, 1e-3);
  Tensor target = tensor(std::vector<int64_t>{2, 0}, {2});
  double expected = -((3 - lse) + 0.0) / 2.0;
  EXPECT_NEAR(nn::functional::cross_entropy(x, target).item(), expected, 1e-6);
}

TEST(Ops, CreationFunctions) {
  EXPECT_EQ(v(full({2}, 2.5)), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(v(arange(4)), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(zeros({2, 0}).numel(), 0);
  EXPECT_EQ(ones({3}, kInt64).dtype(), kInt64);
  EXPECT_EQ(scalar_tensor(4).dim(), 0);
}

TEST(Ops, InPlaceUpdates) {
  Tensor a = zeros({3});
  a.add_(ones({3}), 2.0).mul_(3.0);
  EXPECT_EQ(v(a), (std::vector<double>{6, 6, 6}));
  a.copy_(tensor({1.f, 2.f, 3.f}, {3}));
  EXPECT_EQ(v(a), (std::vector<double>{1, 2, 3}));
}

TEST(Ops, TypePromotionTable) {
  EXPECT_EQ(promote_types(kInt32, kInt64), kInt64);
  EXPECT_EQ(promote_types(kInt32, kFloat16), kFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBFloat16), kFloat32);
  EXPECT_EQ(promote_types(kFloat32, kFloat64), kFloat64);
  EXPECT_EQ(promote_types(kBool, kInt32), kInt32);
  EXPECT_EQ(promote_types(kBool, kBool), kBool);
  EXPECT_EQ(promote_types(kInt64, kFloat32), kFloat32);
  Tensor i32 = ones({2}, kInt32);
  EXPECT_EQ((i32 + i32).dtype(), kInt32);
  EXPECT_EQ((i32 + 1.0).dtype(), kInt32);  // a Python number keeps the dtype
  EXPECT_EQ((i32 + ones({2}, kInt64)).dtype(), kInt64);
  EXPECT_EQ((ones({2}, kFloat16) * 2.0).dtype(), kFloat16);
  EXPECT_EQ((ones({2}, kFloat16) + ones({2}, kBFloat16)).dtype(), kFloat32);
  EXPECT_EQ((ones({2}) + ones({2}, kFloat64)).dtype(), kFloat64);
  EXPECT_EQ((gt(ones({2}), zeros({2})) + ones({2})).dtype(), kFloat32);
  EXPECT_EQ(ones({2}, kInt32).sum().dtype(), kInt64);
}

TEST(Ops, Float64AndInt32Kernels) {
  Tensor d = tensor({1.f, 2.f, 3.f}, {3}).to(kFloat64);
  Tensor third = d / 3.0;
  EXPECT_EQ(third.dtype(), kFloat64);
  EXPECT_DOUBLE_EQ(values(third)[0], 1.0 / 3.0);  // float64 precision, not float32
  EXPECT_DOUBLE_EQ(values(exp(d))[1], std::exp(2.0));
  EXPECT_DOUBLE_EQ(values(matmul(d.unsqueeze(0), d.unsqueeze(1)))[0], 14.0);
  Tensor i = tensor(std::vector<int64_t>{7, -3}, {2}).to(kInt32);
  EXPECT_EQ(values(i * i), (std::vector<double>{49, 9}));
  EXPECT_EQ(values(i.amax()), (std::vector<double>{7}));
  EXPECT_EQ(i.to(kInt32).impl()->storage->nbytes(), 8u);
}

}  // namespace
}  // namespace kiln
