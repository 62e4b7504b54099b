// Gradients of the issue-13 part C ops against central finite differences
// (gradcheck.h): erf, exact gelu, remainder, fmod, maximum/minimum,
// one-sided clamp, max()/min() over all dims, amin, max/min along a dim,
// cumsum; and the zero gradients of the roundings and rounded division.
#include <cmath>
#include <optional>

#include "gradcheck.h"

namespace kiln {
namespace {

using testing::expect_gradients_match;
using TL = std::vector<Tensor>;

class PointwiseGradCheck : public ::testing::Test {
protected:
  void SetUp() override { manual_seed(13); }
};

/// Values away from the kinks of remainder/fmod (a / b not near an integer).
Tensor dividends() { return tensor({2.3f, -2.3f, 5.7f, -5.7f, 0.4f, -0.4f}, {2, 3}); }
Tensor divisors() { return tensor({1.1f, 1.1f, -2.1f, -2.1f, 1.7f, -1.7f}, {2, 3}); }

TEST_F(PointwiseGradCheck, Erf) {
  expect_gradients_match([](const TL &x) { return erf(x[0]); }, {randn({3, 4})});
}
TEST_F(PointwiseGradCheck, GeluExact) {
  expect_gradients_match([](const TL &x) { return gelu(x[0]); }, {randn({3, 4})});
}
TEST_F(PointwiseGradCheck, Remainder) {
  expect_gradients_match([](const TL &x) { return remainder(x[0], x[1]); }, {dividends(), divisors()});
}
TEST_F(PointwiseGradCheck, Fmod) {
  expect_gradients_match([](const TL &x) { return fmod(x[0], x[1]); }, {dividends(), divisors()});
}
TEST_F(PointwiseGradCheck, MinimumBroadcast) {
  expect_gradients_match([](const TL &x) { return minimum(x[0], x[1]); },
                         {tensor({1.f, -2.f, 3.f, 0.5f, 4.f, -1.f}, {2, 3}), tensor({0.f, 1.f, 2.5f}, {3})});
}
TEST_F(PointwiseGradCheck, MaxOfTwoTensors) {
  expect_gradients_match([](const TL &x) { return max(x[0], x[1]); },
                         {tensor({1.f, -2.f, 3.f}, {3}), tensor({0.f, 1.f, 5.f}, {3})});
}
TEST_F(PointwiseGradCheck, ClampOneSided) {
  Tensor x = tensor({-2.f, -0.5f, 0.3f, 1.5f, -1.f, 2.f}, {2, 3});
  expect_gradients_match([](const TL &v) { return clamp_min(v[0], 0.1) + clamp_max(v[0], -0.7); }, {x});
  expect_gradients_match([](const TL &v) { return clamp(v[0], std::nullopt, 1.0); }, {x});
}
TEST_F(PointwiseGradCheck, MaxMinAllDims) {
  expect_gradients_match([](const TL &x) { return max(x[0]) - min(x[0]) * 2.0; }, {randn({3, 4})});
}
TEST_F(PointwiseGradCheck, Amin) {
  expect_gradients_match([](const TL &x) { return amin(x[0], {1}, /*keepdim=*/true); }, {randn({3, 4})});
}
TEST_F(PointwiseGradCheck, MinAlongDim) {
  expect_gradients_match([](const TL &x) { return min(x[0], 0).first; }, {randn({3, 4})});
}
TEST_F(PointwiseGradCheck, Cumsum) {
  expect_gradients_match([](const TL &x) { return cumsum(x[0], 1) * cumsum(x[0], 0); }, {randn({3, 4})});
}

TEST(PointwiseGrad, TiesSplitEvenly) {
  // torch: maximum(x, y) with x == y gives grad / 2 to each; max() of
  // [1, 4, 4] gives 1/2 to each 4; a NaN result sends it to the NaN.
  Tensor x = tensor({2.f, 1.f}, {2}), y = tensor({2.f, 3.f}, {2});
  x.requires_grad_(true);
  y.requires_grad_(true);
  minimum(x, y).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0.5f, 1.f}));
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{0.5f, 0.f}));
  Tensor z = tensor({1.f, 4.f, 4.f}, {3});
  z.requires_grad_(true);
  max(z).backward();
  EXPECT_EQ(z.grad().to_vector<float>(), (std::vector<float>{0.f, 0.5f, 0.5f}));
  Tensor n = tensor({1.f, NAN, 4.f}, {3});
  n.requires_grad_(true);
  min(n).backward();
  EXPECT_EQ(n.grad().to_vector<float>(), (std::vector<float>{0.f, 1.f, 0.f}));
}

TEST(PointwiseGrad, RoundingAndRoundedDivisionHaveZeroGradient) {
  Tensor x = tensor({1.5f, -2.5f, 0.3f}, {3}), y = tensor({2.f, 0.f, -1.f}, {3});
  x.requires_grad_(true);
  y.requires_grad_(true);
  Tensor out = floor(x) + ceil(x) + round(x) + trunc(x) + floor_divide(x, y) + div(x, y, "trunc");
  out.sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0.f, 0.f, 0.f}));
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{0.f, 0.f, 0.f})); // also at y = 0 (not nan)
}

} // namespace
} // namespace kiln
