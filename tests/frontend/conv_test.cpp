// conv2d, pooling, normalization and attention: finite-difference gradients
// (float64), behaviour (running stats, dropout, dtypes) and bad inputs.
#include "gradcheck.h"

namespace kiln::nn::detail {
// Internal conv/pool primitives of frontend/src/nn/conv.cpp: the backward
// formulas of conv2d and max_pool2d, each differentiable in turn.
struct ConvParams {
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
};
Tensor conv2d_input_grad(const Tensor &gy, const Tensor &w, const Shape &x_shape, const ConvParams &p);
Tensor conv2d_weight_grad(const Tensor &x, const Tensor &gy, const Shape &w_shape, const ConvParams &p);
Tensor max_pool2d_scatter(const Tensor &gy, const Tensor &indices, const Shape &x_shape);
Tensor max_pool2d_gather(const Tensor &gx, const Tensor &indices);
} // namespace kiln::nn::detail

namespace kiln {
namespace {

namespace F = nn::functional;
using testing::expect_gradients_match;
using testing::values;
using TL = std::vector<Tensor>;

class ConvGradCheck : public ::testing::Test {
protected:
  void SetUp() override { manual_seed(11); }
};

TEST_F(ConvGradCheck, Conv2dPlain) {
  expect_gradients_match([](const TL &x) { return F::conv2d(x[0], x[1], x[2]); },
                         {randn({2, 2, 4, 4}), randn({3, 2, 3, 3}), randn({3})});
}
TEST_F(ConvGradCheck, Conv2dStridePaddingDilation) {
  expect_gradients_match(
      [](const TL &x) {
        return F::conv2d(x[0], x[1], x[2], {2, 1}, {1, 2}, {2, 1});
      },
      {randn({1, 2, 6, 5}), randn({2, 2, 2, 3}), randn({2})});
}
TEST_F(ConvGradCheck, Conv2dGroupsOnTransposedInput) {
  expect_gradients_match(
      [](const TL &x) {
        return F::conv2d(x[0].transpose(2, 3), x[1], Tensor(), {1, 1}, {1, 1}, {1, 1}, 2);
      },
      {randn({1, 4, 5, 4}), randn({6, 2, 2, 2})});
}
TEST_F(ConvGradCheck, Conv2dUnbatched) {
  expect_gradients_match([](const TL &x) { return F::conv2d(x[0], x[1]); }, {randn({2, 3, 3}), randn({2, 2, 2, 2})});
}
TEST_F(ConvGradCheck, Conv2dInputGradIsDifferentiable) {
  const nn::detail::ConvParams p{{2, 1}, {1, 0}, {1, 2}, 2};
  expect_gradients_match(
      [p](const TL &x) {
        return nn::detail::conv2d_input_grad(x[0], x[1], {1, 4, 5, 5}, p);
      },
      {randn({1, 4, 3, 3}), randn({4, 2, 2, 2})});
}
TEST_F(ConvGradCheck, Conv2dWeightGradIsDifferentiable) {
  const nn::detail::ConvParams p{{1, 2}, {1, 1}, {1, 1}, 2};
  expect_gradients_match(
      [p](const TL &x) {
        return nn::detail::conv2d_weight_grad(x[0], x[1], {4, 1, 2, 3}, p);
      },
      {randn({2, 2, 4, 5}), randn({2, 4, 5, 3})});
}
TEST_F(ConvGradCheck, MaxPool2d) {
  // A permutation of distinct values keeps every window's max unique.
  Tensor x = sin(arange(2 * 3 * 5 * 5).to(kFloat32) * 0.37).reshape({2, 3, 5, 5});
  expect_gradients_match([](const TL &v) { return F::max_pool2d(v[0], {3, 2}, {2, 1}, {1, 1}); }, {x});
}
TEST_F(ConvGradCheck, MaxPool2dScatterAndGatherAreDifferentiable) {
  // Any indices (duplicates too) make scatter and gather adjoint linear maps.
  Tensor indices = tensor(std::vector<int64_t>{0, 5, 5, 15, 3, 3, 8, 12}, {1, 2, 2, 2});
  expect_gradients_match(
      [indices](const TL &x) {
        return nn::detail::max_pool2d_scatter(x[0], indices, {1, 2, 4, 4});
      },
      {randn({1, 2, 2, 2})});
  expect_gradients_match([indices](const TL &x) { return nn::detail::max_pool2d_gather(x[0], indices); },
                         {randn({1, 2, 4, 4})});
}
TEST_F(ConvGradCheck, AvgPool2d) {
  expect_gradients_match(
      [](const TL &x) {
        return F::avg_pool2d(x[0], {3, 2}, {2, 2}, {1, 1});
      },
      {randn({2, 2, 5, 6})});
}
TEST_F(ConvGradCheck, LayerNormAffine) {
  expect_gradients_match(
      [](const TL &x) {
        return F::layer_norm(x[0], {3, 4}, x[1], x[2], 1e-3);
      },
      {randn({2, 3, 4}), randn({3, 4}), randn({3, 4})});
}
TEST_F(ConvGradCheck, LayerNormPlain) {
  expect_gradients_match([](const TL &x) { return F::layer_norm(x[0], {5}); }, {randn({4, 5})});
}
TEST_F(ConvGradCheck, BatchNormTraining) {
  expect_gradients_match(
      [](const TL &x) { return F::batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], /*training=*/true); },
      {randn({3, 2, 2, 3}), randn({2}), randn({2})});
}
TEST_F(ConvGradCheck, BatchNormEval) {
  Tensor rm = randn({3}).to(kFloat64), rv = uniform({3}, 0.5, 2.0).to(kFloat64);
  expect_gradients_match([rm, rv](const TL &x) { return F::batch_norm(x[0], rm, rv, x[1], x[2], false); },
                         {randn({4, 3}), randn({3}), randn({3})});
}
TEST_F(ConvGradCheck, AttentionPlainAndFloatMask) {
  expect_gradients_match([](const TL &x) { return F::scaled_dot_product_attention(x[0], x[1], x[2], x[3]); },
                         {randn({2, 2, 3, 4}), randn({2, 2, 5, 4}), randn({2, 2, 5, 3}), randn({2, 1, 3, 5})});
}
TEST_F(ConvGradCheck, AttentionCausal) {
  expect_gradients_match(
      [](const TL &x) { return F::scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), 0.0, true); },
      {randn({2, 4, 3}), randn({2, 4, 3}), randn({2, 4, 2})});
}

// ---- behaviour -------------------------------------------------------------------------

TEST(ConvBehaviour, BatchNormEvalLeavesRunningStats) {
  Tensor rm = tensor({0.5f, -1.f}, {2}), rv = tensor({2.f, 0.5f}, {2});
  Tensor y = F::batch_norm(randn({3, 2}), rm, rv);
  EXPECT_EQ(values(rm), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(values(rv), (std::vector<double>{2.0, 0.5}));
  EXPECT_EQ(y.sizes(), (Shape{3, 2}));
}

TEST(ConvBehaviour, BatchNormTrainingUpdatesUnderGrad) {
  Tensor x = tensor({1.f, 2.f, 3.f, 6.f}, {4, 1}).requires_grad_();
  Tensor rm = zeros({1}), rv = ones({1});
  Tensor y = F::batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.5);
  EXPECT_NEAR(rm.item(), 0.5 * 3.0, 1e-6);                // batch mean 3
  EXPECT_NEAR(rv.item(), 0.5 + 0.5 * (14.0 / 3.0), 1e-5); // unbiased var 14/3
  y.sum().backward();
  for (double g : values(x.grad()))
    EXPECT_NEAR(g, 0.0, 1e-5); // normalization removes the mean
}

TEST(ConvBehaviour, HalfInputsComputeInFloat32) {
  manual_seed(3);
  Tensor x = randn({1, 2, 4, 4}), w = randn({2, 2, 3, 3});
  Tensor ref = F::conv2d(x.to(kFloat16).to(kFloat32), w.to(kFloat16).to(kFloat32));
  Tensor got = F::conv2d(x.to(kFloat16), w.to(kFloat16));
  EXPECT_EQ(got.dtype(), kFloat16);
  auto a = values(got), e = values(ref);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], e[i], 1e-2 * std::max(1.0, std::abs(e[i])));
  EXPECT_EQ(F::max_pool2d(x.to(kBFloat16), {2, 2}).dtype(), kBFloat16);
  EXPECT_EQ(F::layer_norm(x.to(kBFloat16), {4}).dtype(), kBFloat16);
}

TEST(ConvBehaviour, AttentionDropoutUsesFunctionalDropout) {
  manual_seed(5);
  Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 3});
  manual_seed(9);
  Tensor got = F::scaled_dot_product_attention(q, k, v, Tensor(), 0.5);
  // Same seed, same draw: the reference redoes softmax -> dropout -> bmm.
  manual_seed(9);
  Tensor scores = bmm(q, k.transpose(1, 2)) * 0.5;
  Tensor expected = bmm(F::dropout(F::softmax(scores, -1), 0.5, true), v);
  auto a = values(got), e = values(expected);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], e[i], 1e-5);
  Tensor all_dropped = F::scaled_dot_product_attention(q, k, v, Tensor(), 1.0);
  for (double x : values(all_dropped))
    EXPECT_EQ(x, 0.0);
}

// ---- bad inputs ------------------------------------------------------------------------

/// EXPECTs that `fn` throws kiln::Error whose message contains every part.
void expect_error(const std::function<void()> &fn, const std::vector<std::string> &parts) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing " << parts[0];
  } catch (const Error &e) {
    for (const std::string &p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(ConvBadInput, Conv2d) {
  Tensor x = zeros({1, 4, 5, 5}), w = zeros({2, 2, 3, 3});
  expect_error([&] { F::conv2d(zeros({4, 5}), w); }, {"conv2d", "[4, 5]"});
  expect_error([&] { F::conv2d(x, w); }, {"conv2d", "[2, 2, 3, 3]", "groups = 1", "[1, 4, 5, 5]"});
  expect_error(
      [&] {
        F::conv2d(x, zeros({3, 2, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2);
      },
      {"conv2d", "C_out = 3", "groups = 2"});
  expect_error([&] { F::conv2d(x, w, Tensor(), {0, 1}, {0, 0}, {1, 1}, 2); }, {"conv2d", "stride", "[0, 1]"});
  expect_error([&] { F::conv2d(x, w, Tensor(), {1, 1}, {-1, 0}, {1, 1}, 2); }, {"conv2d", "padding", "[-1, 0]"});
  expect_error([&] { F::conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {3, 1}, 2); }, {"conv2d", "kernel size 7", "5"});
  expect_error([&] { F::conv2d(x, w, zeros({3}), {1, 1}, {0, 0}, {1, 1}, 2); }, {"conv2d", "bias", "[3]"});
  expect_error([&] { F::conv2d(x, w.to(kFloat64), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2); }, {"conv2d", "float64"});
  expect_error([&] { F::conv2d(zeros({1, 4, 5, 5}, kInt64), w); }, {"conv2d", "int64"});
  expect_error([&] { F::conv2d(x, w, Tensor(), {1, 1}, {0, 0}, {1, 1}, 0); }, {"conv2d", "groups", "0"});
}

TEST(ConvBadInput, MaxPool2d) {
  expect_error([] { F::max_pool2d(zeros({2, 3}), {2, 2}); }, {"max_pool2d", "[2, 3]"});
  expect_error([] { F::max_pool2d(zeros({1, 1, 4, 4}), {0, 2}); }, {"max_pool2d", "kernel_size", "[0, 2]"});
  expect_error(
      [] {
        F::max_pool2d(zeros({1, 1, 4, 4}), {2, 2}, {1, 1}, {2, 0});
      },
      {"max_pool2d", "padding [2, 0]", "half"});
  expect_error([] { F::max_pool2d(zeros({1, 1, 2, 4}), {3, 3}); }, {"max_pool2d", "kernel size 3", "2"});
}

TEST(ConvBadInput, AvgPool2d) {
  expect_error([] { F::avg_pool2d(zeros({1, 1, 4, 4}, kInt64), {2, 2}); }, {"avg_pool2d", "int64"});
  expect_error([] { F::avg_pool2d(zeros({1, 1, 4, 4}), {2, 2}, {-1, 1}); }, {"avg_pool2d", "stride", "[-1, 1]"});
}

TEST(ConvBadInput, LayerNorm) {
  Tensor x = zeros({2, 3, 4});
  expect_error([&] { F::layer_norm(x, {3}); }, {"layer_norm", "[2, 3, 4]", "[3]"});
  expect_error([&] { F::layer_norm(x, {}); }, {"layer_norm", "normalized_shape []"});
  expect_error([&] { F::layer_norm(x, {4}, zeros({3})); }, {"layer_norm", "weight", "[4]", "[3]"});
  expect_error([&] { F::layer_norm(x, {4}, Tensor(), zeros({4}, kInt64)); }, {"layer_norm", "bias", "int64"});
}

TEST(ConvBadInput, BatchNorm) {
  Tensor x = zeros({4, 3});
  expect_error([&] { F::batch_norm(zeros({3}), zeros({3}), ones({3})); }, {"batch_norm", "[3]"});
  expect_error([&] { F::batch_norm(x, zeros({2}), ones({3})); }, {"batch_norm", "running_mean", "[3]", "[2]"});
  expect_error([&] { F::batch_norm(x, Tensor(), Tensor()); }, {"batch_norm", "eval mode"});
  expect_error(
      [&] {
        F::batch_norm(zeros({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), true);
      },
      {"batch_norm", "more than 1 value per channel", "[1, 3]"});
  expect_error([&] { F::batch_norm(x, zeros({3}), ones({3}), Tensor(), Tensor(), false, 0.1, -1.0); },
               {"batch_norm", "eps", "-1"});
}

TEST(ConvBadInput, ScaledDotProductAttention) {
  Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4}), v = zeros({2, 5, 6});
  auto sdpa = F::scaled_dot_product_attention;
  expect_error(
      [&] {
        sdpa(q, zeros({2, 5, 3}), v, Tensor(), 0.0, false);
      },
      {"scaled_dot_product_attention", "key embedding size 3", "4"});
  expect_error(
      [&] {
        sdpa(q, k, zeros({2, 4, 6}), Tensor(), 0.0, false);
      },
      {"scaled_dot_product_attention", "value sequence length 4", "5"});
  expect_error(
      [&] {
        sdpa(q, zeros({3, 5, 4}), v, Tensor(), 0.0, false);
      },
      {"scaled_dot_product_attention", "[3, 5, 4]", "batch"});
  expect_error([&] { sdpa(q, k, v, zeros({4, 5}), 0.0, false); }, {"scaled_dot_product_attention", "[4, 5]"});
  expect_error(
      [&] {
        sdpa(q, k, v, zeros({3, 5}, kInt64), 0.0, false);
      },
      {"scaled_dot_product_attention", "attn_mask", "int64"});
  expect_error([&] { sdpa(q, k, v, Tensor(), 1.5, false); }, {"scaled_dot_product_attention", "dropout_p", "1.5"});
  expect_error(
      [&] {
        sdpa(q, k, v, zeros({3, 5}), 0.0, true);
      },
      {"scaled_dot_product_attention", "is_causal", "[3, 5]"});
  expect_error([&] { sdpa(zeros({4}), k, v, Tensor(), 0.0, false); }, {"scaled_dot_product_attention", "[4]"});
}

} // namespace
} // namespace kiln
