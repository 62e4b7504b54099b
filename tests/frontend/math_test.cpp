// Extra pointwise math, reductions and bmm: closed-form values, dtype rules,
// finite-difference gradients (float64) and bad input (MathBadInput).
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gradcheck.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using testing::expect_gradients_match;
using testing::values;
using TL = std::vector<Tensor>;

void expect_values(const Tensor &t, const std::vector<double> &expected, double tol = 1e-6) {
  auto v = values(t);
  ASSERT_EQ(v.size(), expected.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(expected[i])) EXPECT_TRUE(std::isnan(v[i])) << "element " << i;
    else if (std::isinf(expected[i])) EXPECT_EQ(v[i], expected[i]) << "element " << i;
    else EXPECT_NEAR(v[i], expected[i], tol) << "element " << i;
  }
}

/// Gradient of sum(f(x)) for x = values (float32 leaf).
Tensor grad_of_sum(const std::function<Tensor(const Tensor &)> &f, const std::vector<float> &v) {
  Tensor x = tensor(v, {static_cast<int64_t>(v.size())}).requires_grad_();
  f(x).sum().backward();
  return x.grad();
}

// ---- closed-form values --------------------------------------------------------

TEST(MathPointwise, ClosedFormValues) {
  expect_values(sigmoid(tensor({0.f}, {1})), {0.5});
  expect_values(sigmoid(tensor({INFINITY, -INFINITY}, {2})), {1.0, 0.0});
  expect_values(tanh(tensor({0.f}, {1})), {0.0});
  expect_values(rsqrt(tensor({4.f, 0.25f}, {2})), {0.5, 2.0});
  expect_values(sin(tensor({0.f}, {1})), {0.0});
  expect_values(cos(tensor({0.f}, {1})), {1.0});
  expect_values(abs(tensor({-2.f, 0.f, 3.f}, {3})), {2.0, 0.0, 3.0});
  expect_values(silu(tensor({0.f}, {1})), {0.0});
  // GELU(1) = Phi(1) = 0.8413447460685429; tanh form: 0.8411919906082768.
  expect_values(gelu(tensor({0.f, 1.f}, {2})), {0.0, 0.8413447460685429});
  expect_values(gelu(tensor({1.f}, {1}), "tanh"), {0.8411919906082768});
}

TEST(MathPointwise, SaturatedTailsHaveFiniteGradients) {
  Tensor g = grad_of_sum([](const Tensor &x) { return sigmoid(x); }, {-200.f, 0.f, 200.f});
  expect_values(g, {0.0, 0.25, 0.0});
  g = grad_of_sum([](const Tensor &x) { return silu(x); }, {-200.f, 200.f});
  expect_values(g, {0.0, 1.0});
  g = grad_of_sum([](const Tensor &x) { return gelu(x, "tanh"); }, {-200.f, 200.f});
  expect_values(g, {0.0, 1.0});
}

TEST(MathPointwise, DtypeRules) {
  Tensor i = tensor(std::vector<int64_t>{-3, 2}, {2});
  EXPECT_EQ(abs(i).dtype(), kInt64);  // as torch.abs
  expect_values(abs(i), {3.0, 2.0});
  EXPECT_EQ(tanh(i).dtype(), kFloat32);
  EXPECT_EQ(sigmoid(i).dtype(), kFloat32);
  EXPECT_EQ(gelu(ones({2}, kFloat16)).dtype(), kFloat16);
  EXPECT_EQ(sin(ones({2}, kBFloat16)).dtype(), kBFloat16);
  EXPECT_EQ(rsqrt(ones({2}, kFloat64)).dtype(), kFloat64);
}

TEST(MathPointwise, AbsGradientAtZeroIsZero) {
  expect_values(grad_of_sum([](const Tensor &x) { return abs(x); }, {-1.f, 0.f, 2.f}), {-1.0, 0.0, 1.0});
}

TEST(MathPointwise, ClampValuesAndGradient) {
  auto f = [](const Tensor &x) { return clamp(x, -1.0, 1.0); };
  expect_values(f(tensor({-2.f, 0.5f, 3.f, -1.f}, {4})), {-1.0, 0.5, 1.0, -1.0});
  // Gradient 1 inside [min, max] including the bounds, 0 outside.
  expect_values(grad_of_sum(f, {-2.f, 0.5f, 3.f, -1.f}), {0.0, 1.0, 0.0, 1.0});
  // min > max gives max everywhere (as torch.clamp); NaN passes through.
  expect_values(clamp(tensor({-5.f, 5.f, NAN}, {3}), 2.0, 1.0), {1.0, 1.0, NAN});
  expect_values(clamp(tensor({-5.f, 5.f}, {2}), 0.0, INFINITY), {0.0, 5.0});
  Tensor i = tensor(std::vector<int64_t>{-5, 5}, {2});
  EXPECT_EQ(clamp(i, 0.0, 3.0).dtype(), kInt64);
  EXPECT_EQ(clamp(i, 0.5, 3.0).dtype(), kFloat32);
  Tensor x = ones({2});
  Tensor y = clamp(x, -INFINITY, INFINITY);  // a copy, never an alias
  y.fill_(7.0);
  expect_values(x, {1.0, 1.0});
}

TEST(MathPointwise, MaskedFillBroadcastsMaskAndBlocksGradient) {
  Tensor x = tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}).requires_grad_();
  Tensor mask = gt(tensor({1.f, 0.f, 1.f}, {3}), zeros({}));
  Tensor y = masked_fill(x, mask, -1.0);
  expect_values(y, {-1, 2, -1, -1, 5, -1});
  y.sum().backward();
  expect_values(x.grad(), {0, 1, 0, 0, 1, 0});
}

TEST(MathReduce, VarStdClosedForm) {
  Tensor x = tensor({1.f, 2.f, 3.f, 4.f}, {4});
  expect_values(var(x), {5.0 / 3.0});
  expect_values(var(x, {}, 0), {1.25});
  expect_values(kiln::std(x, {}, 0), {std::sqrt(1.25)});
  expect_values(var(tensor({2.f}, {1})), {NAN});  // 0 / 0 with one element, as torch
  Tensor m = tensor({1.f, 2.f, 3.f, 5.f}, {2, 2});
  EXPECT_EQ(var(m, {1}, 1, true).sizes(), (Shape{2, 1}));
  expect_values(var(m, {1}), {0.5, 2.0});
}

TEST(MathReduce, MaxMinIndicesTiesAndNaN) {
  Tensor x = tensor({1.f, 3.f, 3.f, 2.f}, {4}).requires_grad_();
  auto [v, i] = max(x, 0);
  expect_values(v, {3.0});
  EXPECT_EQ(i.dtype(), kInt64);
  expect_values(i, {1.0});  // first on ties
  v.backward();
  expect_values(x.grad(), {0, 1, 0, 0});
  auto [nv, ni] = max(tensor({1.f, NAN, 3.f}, {3}), 0);
  expect_values(nv, {NAN});
  expect_values(ni, {1.0});
  auto [mv, mi] = min(tensor({4.f, 1.f, 2.f, 1.f, 0.f, 9.f}, {2, 3}), 1, /*keepdim=*/true);
  EXPECT_EQ(mv.sizes(), (Shape{2, 1}));
  expect_values(mv, {1.0, 0.0});
  expect_values(mi, {1.0, 1.0});
  auto [sv, si] = min(full({}, 2.0), 0);  // 0-d input
  EXPECT_EQ(sv.dim(), 0);
  expect_values(si, {0.0});
  auto [iv, ii] = max(tensor(std::vector<int64_t>{5, 9, 2}, {3}), 0);
  EXPECT_EQ(iv.dtype(), kInt64);
  expect_values(iv, {9.0});
}

TEST(MathReduce, LogsumexpStableAndInfinite) {
  expect_values(logsumexp(tensor({0.f, 0.f}, {2}), {0}), {std::log(2.0)});
  expect_values(logsumexp(tensor({1000.f, 1000.f}, {2}), {0}), {1000.0 + std::log(2.0)}, 1e-4);
  expect_values(logsumexp(tensor({-INFINITY, -INFINITY}, {2}), {0}), {-INFINITY});
  expect_values(logsumexp(tensor({INFINITY, 1.f}, {2}), {0}), {INFINITY});
  EXPECT_EQ(logsumexp(ones({2, 3}), {1}, true).sizes(), (Shape{2, 1}));
}

TEST(MathReduce, CumsumValuesAndDtypes) {
  expect_values(cumsum(tensor({1.f, 2.f, 3.f}, {3}), 0), {1.0, 3.0, 6.0});
  expect_values(cumsum(tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}), 0), {1, 2, 4, 6});
  expect_values(cumsum(tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}), -1), {1, 3, 3, 7});
  expect_values(cumsum(tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}).t(), 1), {1, 4, 2, 6});  // strided input
  Tensor i = cumsum(tensor(std::vector<int64_t>{1, 2, 3}, {3}), 0);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(cumsum(gt(ones({3}), zeros({})), 0).dtype(), kInt64);
  // d(sum(w * cumsum(x)))/dx_i = sum_{j >= i} w_j.
  Tensor x = tensor({1.f, 2.f, 3.f}, {3}).requires_grad_();
  cumsum(x, 0).backward(tensor({1.f, 10.f, 100.f}, {3}));
  expect_values(x.grad(), {111.0, 110.0, 100.0});
}

TEST(MathBmm, MatchesMatmulPerBatchAndTransposedViews) {
  manual_seed(3);
  Tensor a = randn({3, 2, 4}), b = randn({3, 4, 5});
  Tensor c = bmm(a, b);
  ASSERT_EQ(c.sizes(), (Shape{3, 2, 5}));
  for (int64_t i = 0; i < 3; ++i) {
    Tensor ref = matmul(a.narrow(0, i, 1).squeeze(0), b.narrow(0, i, 1).squeeze(0));
    expect_values(c.narrow(0, i, 1).squeeze(0), values(ref), 1e-5);
  }
  Tensor bt = randn({3, 5, 4}).transpose(1, 2);  // column-major views, no copy
  expect_values(bmm(a, bt), values(bmm(a.to(kFloat64), bt.to(kFloat64))), 1e-5);
  EXPECT_EQ(bmm(a.to(kFloat64), b.to(kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(bmm(a.to(kFloat16), b.to(kFloat16)).dtype(), kFloat16);
  expect_values(bmm(ones({2, 2, 0}), ones({2, 0, 3})), std::vector<double>(12, 0.0));
}

// ---- finite differences (float64) ---------------------------------------------

TEST(MathGradcheck, Pointwise) {
  manual_seed(0);
  Tensor x = randn({2, 3});
  expect_gradients_match([](const TL &in) { return tanh(in[0]); }, {x});
  expect_gradients_match([](const TL &in) { return sigmoid(in[0]); }, {x * 3.0});
  expect_gradients_match([](const TL &in) { return silu(in[0]); }, {x * 3.0});
  expect_gradients_match([](const TL &in) { return gelu(in[0]); }, {x * 2.0});
  expect_gradients_match([](const TL &in) { return gelu(in[0], "tanh"); }, {x * 2.0});
  expect_gradients_match([](const TL &in) { return sin(in[0]); }, {x});
  expect_gradients_match([](const TL &in) { return cos(in[0]); }, {x});
  expect_gradients_match([](const TL &in) { return rsqrt(in[0]); }, {abs(x) + 0.5});
  expect_gradients_match([](const TL &in) { return abs(in[0]); }, {tensor({-1.5f, -0.2f, 0.3f, 2.f}, {4})});
  expect_gradients_match([](const TL &in) { return clamp(in[0], -0.5, 0.7); },
                         {tensor({-1.5f, -0.2f, 0.3f, 2.f}, {4})});
  Tensor mask = gt(randn({3}), zeros({}));
  expect_gradients_match([mask](const TL &in) { return masked_fill(in[0], mask, 3.0); }, {x});
}

TEST(MathGradcheck, Reductions) {
  manual_seed(1);
  Tensor x = randn({3, 4});
  expect_gradients_match([](const TL &in) { return var(in[0], {1}); }, {x});
  expect_gradients_match([](const TL &in) { return var(in[0], {}, 0, true); }, {x});
  expect_gradients_match([](const TL &in) { return kiln::std(in[0], {0}); }, {x});
  expect_gradients_match([](const TL &in) { return max(in[0], 1).first; }, {x});
  expect_gradients_match([](const TL &in) { return min(in[0], 0, true).first; }, {x});
  expect_gradients_match([](const TL &in) { return logsumexp(in[0], {1}); }, {x});
  expect_gradients_match([](const TL &in) { return logsumexp(in[0], {0, 1}, true); }, {x});
  expect_gradients_match([](const TL &in) { return cumsum(in[0], 0); }, {x});
  expect_gradients_match([](const TL &in) { return cumsum(in[0].t(), -1); }, {x});
}

TEST(MathGradcheck, Bmm) {
  manual_seed(2);
  Tensor a = randn({2, 3, 4}), b = randn({2, 4, 2}), bt = randn({2, 2, 4});
  expect_gradients_match([](const TL &in) { return bmm(in[0], in[1]); }, {a, b});
  expect_gradients_match([](const TL &in) { return bmm(in[0], in[1].transpose(1, 2)); }, {a, bt});
}

// ---- bad input ---------------------------------------------------------------------

/// Runs call, expects kiln::Error whose message holds every substring.
void expect_error(const std::function<void()> &call, const std::vector<std::string> &parts) {
  try {
    call();
    ADD_FAILURE() << "no kiln::Error thrown; expected one mentioning " << parts.front();
  } catch (const Error &e) {
    const std::string msg = e.what();
    for (const auto &p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

Tensor bools() { return gt(ones({3}), zeros({})); }

TEST(MathBadInput, Pointwise) {
  expect_error([] { abs(bools()); }, {"abs", "bool"});
  expect_error([] { rsqrt(Tensor()); }, {"rsqrt", "undefined"});
  expect_error([] { tanh(bools()); }, {"tanh", "bool"});
  expect_error([] { sigmoid(bools()); }, {"sigmoid", "bool"});
  expect_error([] { silu(Tensor()); }, {"silu", "undefined"});
  expect_error([] { gelu(ones({2}), "fast"); }, {"gelu", "\"fast\"", "\"tanh\""});
  expect_error([] { gelu(bools()); }, {"gelu", "bool"});
  expect_error([] { sin(bools()); }, {"sin", "bool"});
  expect_error([] { cos(Tensor()); }, {"cos", "undefined"});
  expect_error([] { clamp(ones({2}), NAN, 1.0); }, {"clamp", "min=nan"});
  expect_error([] { clamp(bools(), 0.0, 1.0); }, {"clamp", "bool"});
  expect_error([] { masked_fill(ones({3}), ones({3}), 0.0); }, {"masked_fill", "bool", "float32"});
  expect_error([] { masked_fill(ones({2, 3}), gt(ones({4}), zeros({})), 0.0); }, {"masked_fill", "[4]", "[2, 3]"});
  expect_error([] { masked_fill(ones({3}), gt(ones({2, 3}), zeros({})), 0.0); }, {"masked_fill", "[2, 3]", "[3]"});
}

TEST(MathBadInput, Reductions) {
  expect_error([] { var(ones({2}, kInt64)); }, {"var", "int64"});
  expect_error([] { var(ones({2, 3}), {2}); }, {"var", "dimension 2", "[2, 3]"});
  expect_error([] { var(ones({2, 3}), {1, -1}); }, {"var", "twice"});
  expect_error([] { kiln::std(ones({2}, kInt32)); }, {"std", "int32"});
  expect_error([] { max(ones({2, 3}), 3); }, {"max", "dimension 3", "[2, 3]"});
  expect_error([] { max(ones({0, 2}), 0); }, {"max", "zero-size", "[0, 2]"});
  expect_error([] { min(ones({2}), -3); }, {"min", "-3"});
  expect_error([] { logsumexp(ones({2}), {5}); }, {"logsumexp", "dimension 5"});
  expect_error([] { logsumexp(bools(), {0}); }, {"logsumexp", "bool"});
  expect_error([] { cumsum(ones({2, 3}), 2); }, {"cumsum", "dimension 2", "[2, 3]"});
  expect_error([] { cumsum(Tensor(), 0); }, {"cumsum", "undefined"});
}

TEST(MathBadInput, Bmm) {
  expect_error([] { bmm(ones({2, 3}), ones({3, 4})); }, {"bmm", "3-D", "[2, 3]"});
  expect_error([] { bmm(ones({2, 3, 4}), ones({3, 4, 5})); }, {"bmm", "batch", "2 != 3"});
  expect_error([] { bmm(ones({2, 3, 4}), ones({2, 5, 6})); }, {"bmm", "[2, 3, 4]", "[2, 5, 6]", "4 != 5"});
  expect_error([] { bmm(ones({1, 2, 2}, kInt64), ones({1, 2, 2}, kInt64)); }, {"bmm", "int64"});
  expect_error([] { bmm(Tensor(), ones({1, 2, 2})); }, {"bmm", "undefined"});
}

}  // namespace
}  // namespace kiln
