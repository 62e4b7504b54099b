// The fused eager kernels (frontend/src/ops/fused.h) against the composites
// they replace outside a trace (the same public op with the fused kernels
// switched off), against finite differences, and their composite backward
// (what a trace records). PyTorch golden values for softmax, log_softmax,
// gelu "tanh" and layer_norm are checked through the same public ops by
// golden_core_test, golden_math_test and golden_modules_test, which now run
// the fused kernels.
#include <cmath>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "gradcheck.h"
#include "kiln/kiln.h"
#include "ops/fused.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using Fn = std::function<Tensor(const Tensor &)>;

/// Restores the fused-kernel switch at scope exit.
struct FusedSwitch {
  explicit FusedSwitch(bool on) : prev(fused::enabled()) { fused::set_enabled(on); }
  ~FusedSwitch() { fused::set_enabled(prev); }
  bool prev;
};

/// |got - want| <= atol + rtol * max|want| elementwise: relative to the
/// tensor's largest magnitude, as gradcheck.h (float32 roundings of a row's
/// sum or dot product reach every element of the row at that scale).
void expect_close(const Tensor &got, const Tensor &want, double rtol, double atol, const char *what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0.0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], atol + rtol * scale) << what << " element " << i;
}

struct Outcome {
  Tensor out;
  std::vector<Tensor> grads;
};

/// f(inputs) and the gradients of sum(f * w) for a fixed random w, with the
/// fused kernels on or off.
Outcome run(const std::function<Tensor(const std::vector<Tensor> &)> &f, const std::vector<Tensor> &inputs, bool fused_on) {
  FusedSwitch sw(fused_on);
  std::vector<Tensor> leaves;
  for (const Tensor &t : inputs) leaves.push_back(t.detach().clone().requires_grad_(true));
  Tensor out = f(leaves);
  manual_seed(99);
  Tensor w = randn(out.sizes()).to(out.dtype());
  (out * w).sum().backward();
  Outcome r{out.detach(), {}};
  for (const Tensor &l : leaves) r.grads.push_back(l.grad());
  return r;
}

/// Fused and composite agree in value and gradient.
void expect_matches_composite(const std::function<Tensor(const std::vector<Tensor> &)> &f,
                              const std::vector<Tensor> &inputs, double rtol, double atol) {
  const Outcome fused_run = run(f, inputs, true), composite = run(f, inputs, false);
  expect_close(fused_run.out, composite.out, rtol, atol, "value");
  for (size_t k = 0; k < inputs.size(); ++k) {
    ASSERT_EQ(fused_run.grads[k].defined(), composite.grads[k].defined()) << "input " << k;
    if (composite.grads[k].defined()) expect_close(fused_run.grads[k], composite.grads[k], rtol, atol, "gradient");
  }
}

Tensor random(const Shape &shape, DType dtype, double scale = 3.0) {
  manual_seed(7);
  return (randn(shape) * scale).to(dtype);
}

// ---- softmax / log_softmax ------------------------------------------------------------

TEST(EagerFused, SoftmaxMatchesCompositeOverEveryDim) {
  for (DType dt : {kFloat64, kFloat32})
    for (int64_t dim : {-1, 0, 1, 2})
      for (bool log : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " dim " << dim << " log " << log);
        auto f = [&](const std::vector<Tensor> &in) { return log ? F::log_softmax(in[0], dim) : F::softmax(in[0], dim); };
        expect_matches_composite(f, {random({5, 7, 33}, dt)}, dt == kFloat64 ? 1e-12 : 1e-6, 0.0);
      }
}

TEST(EagerFused, SoftmaxLargeRowsRunInParallelChunks) {
  // 300 x 1024 elements: over the parallel threshold, several row chunks.
  for (bool log : {false, true}) {
    auto f = [&](const std::vector<Tensor> &in) { return log ? F::log_softmax(in[0], 1) : F::softmax(in[0], 1); };
    expect_matches_composite(f, {random({300, 1024}, kFloat32)}, 1e-6, 0.0);
  }
}

TEST(EagerFused, SoftmaxOfStridedInputAndInfinities) {
  Tensor x = random({6, 9}, kFloat32).transpose(0, 1);  // non-contiguous
  auto soft = [](const std::vector<Tensor> &in) { return F::softmax(in[0], -1); };
  expect_matches_composite(soft, {x}, 1e-6, 0.0);
  // A masked (-inf) entry gets probability 0, as in attention.
  Tensor masked = where(gt(random({4, 8}, kFloat32), zeros({})), random({4, 8}, kFloat32),
                        full({}, -INFINITY));
  const Outcome a = run(soft, {masked}, true), b = run(soft, {masked}, false);
  expect_close(a.out, b.out, 1e-6, 0.0, "masked value");
}

TEST(EagerFused, SoftmaxGradientsMatchFiniteDifferences) {
  for (bool log : {false, true}) {
    FusedSwitch on(true);
    testing::expect_gradients_match(
        [&](const std::vector<Tensor> &in) { return log ? F::log_softmax(in[0], 1) : F::softmax(in[0], 1); },
        {random({3, 5, 4}, kFloat64, 1.0)});
    testing::expect_gradients_match(
        [&](const std::vector<Tensor> &in) { return log ? F::log_softmax(in[0], -1) : F::softmax(in[0], -1); },
        {random({4, 6}, kFloat64, 1.0)});
  }
}

TEST(EagerFused, CrossEntropyMatchesComposite) {
  manual_seed(3);
  Tensor target = (rand({16}) * 9.99).to(kInt64);  // class indices 0..9
  auto f = [&](const std::vector<Tensor> &in) { return F::cross_entropy(in[0], target); };
  expect_matches_composite(f, {random({16, 10}, kFloat32)}, 1e-6, 0.0);
}

// ---- layer_norm ------------------------------------------------------------------------------

TEST(EagerFused, LayerNormMatchesCompositeWithAndWithoutAffine) {
  for (DType dt : {kFloat64, kFloat32})
    for (int affine = 0; affine < 4; ++affine) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " affine " << affine);
      const bool has_w = affine & 1, has_b = affine & 2;
      auto f = [&](const std::vector<Tensor> &in) {
        return F::layer_norm(in[0], {6, 8}, has_w ? in[1] : Tensor(), has_b ? in[2] : Tensor(), 1e-5);
      };
      const double rtol = dt == kFloat64 ? 1e-12 : 1e-6;
      expect_matches_composite(f, {random({3, 6, 8}, dt), random({6, 8}, dt, 1.0) + 1.0, random({6, 8}, dt, 1.0)},
                               rtol, 0.0);
    }
}

TEST(EagerFused, LayerNormLargeBatchIsDeterministicAcrossChunks) {
  // 512 rows of 128: several row chunks; the weight and bias gradients sum
  // chunk partials in a fixed order, so two runs give the same bits.
  auto f = [](const std::vector<Tensor> &in) { return F::layer_norm(in[0], {128}, in[1], in[2], 1e-5); };
  const std::vector<Tensor> in{random({512, 128}, kFloat32), random({128}, kFloat32, 1.0),
                               random({128}, kFloat32, 1.0)};
  expect_matches_composite(f, in, 1e-6, 0.0);
  const Outcome a = run(f, in, true), b = run(f, in, true);
  for (size_t k = 0; k < in.size(); ++k) EXPECT_EQ(a.grads[k].to_vector<float>(), b.grads[k].to_vector<float>());
}

TEST(EagerFused, LayerNormGradientsMatchFiniteDifferences) {
  FusedSwitch on(true);
  testing::expect_gradients_match(
      [](const std::vector<Tensor> &in) { return F::layer_norm(in[0], {5}, in[1], in[2], 1e-5); },
      {random({4, 5}, kFloat64, 1.0), random({5}, kFloat64, 1.0), random({5}, kFloat64, 1.0)});
  testing::expect_gradients_match(
      [](const std::vector<Tensor> &in) { return F::layer_norm(in[0], {2, 3}, Tensor(), Tensor(), 1e-5); },
      {random({2, 2, 3}, kFloat64, 1.0)});
}

// ---- gelu "tanh" -------------------------------------------------------------------------------

TEST(EagerFused, GeluTanhMatchesComposite) {
  auto f = [](const std::vector<Tensor> &in) { return gelu(in[0], "tanh"); };
  expect_matches_composite(f, {random({1000}, kFloat64)}, 1e-12, 0.0);
  // float32 (both sides round differently where 1 + tanh cancels): against
  // the float64 composite.
  const Tensor x32 = random({70000}, kFloat32);  // over the parallel threshold
  const Outcome fused32 = run(f, {x32}, true), ref64 = run(f, {x32.to(kFloat64)}, false);
  expect_close(fused32.out, ref64.out, 1e-6, 0.0, "float32 value");
  expect_close(fused32.grads[0], ref64.grads[0], 1e-6, 0.0, "float32 gradient");
}

TEST(EagerFused, GeluTanhGradientMatchesFiniteDifferences) {
  FusedSwitch on(true);
  testing::expect_gradients_match([](const std::vector<Tensor> &in) { return gelu(in[0], "tanh"); },
                                  {random({40}, kFloat64, 4.0)});
}

// ---- the composite backward (what a trace records) ---------------------------------------

TEST(EagerFused, CompositeBackwardOfAFusedForwardMatchesFusedBackward) {
  // Forward fused, backward with the fused kernels off: the node's backward
  // then computes its formula from primitive ops, as under a trace.
  auto grads_with = [](const std::function<Tensor(const std::vector<Tensor> &)> &f, std::vector<Tensor> in,
                       bool fused_backward) {
    for (Tensor &t : in) t = t.detach().clone().requires_grad_(true);
    Tensor out;
    {
      FusedSwitch on(true);
      out = f(in);
    }
    FusedSwitch sw(fused_backward);
    manual_seed(5);
    (out * randn(out.sizes()).to(out.dtype())).sum().backward();
    std::vector<Tensor> g;
    for (const Tensor &t : in) g.push_back(t.grad());
    return g;
  };
  const std::vector<std::function<Tensor(const std::vector<Tensor> &)>> fns{
      [](const std::vector<Tensor> &in) { return F::softmax(in[0], 1); },
      [](const std::vector<Tensor> &in) { return F::log_softmax(in[0], 0); },
      [](const std::vector<Tensor> &in) { return gelu(in[0], "tanh"); },
      [](const std::vector<Tensor> &in) { return F::layer_norm(in[0], {4}, in[1], in[2], 1e-5); },
      [](const std::vector<Tensor> &in) { return F::layer_norm(in[0], {3, 4}, Tensor(), Tensor(), 1e-5); }};
  const std::vector<Tensor> in{random({3, 4}, kFloat64, 1.0), random({4}, kFloat64, 1.0),
                               random({4}, kFloat64, 1.0)};
  for (size_t i = 0; i < fns.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "function " << i);
    const auto a = grads_with(fns[i], in, true), b = grads_with(fns[i], in, false);
    for (size_t k = 0; k < a.size(); ++k) {
      ASSERT_EQ(a[k].defined(), b[k].defined());
      if (a[k].defined()) expect_close(a[k], b[k], 1e-12, 0.0, "gradient");
    }
  }
}

TEST(EagerFused, HalfInputsKeepTheComposite) {
  EXPECT_FALSE(fused::applies(zeros({2, 3}).to(kBFloat16)));
  EXPECT_FALSE(fused::applies(zeros({2, 3}).to(kFloat16)));
  EXPECT_TRUE(fused::applies(zeros({2, 3})));
  FusedSwitch off(false);
  EXPECT_FALSE(fused::applies(zeros({2, 3})));
}

}  // namespace
}  // namespace kiln
