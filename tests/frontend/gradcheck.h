// gradcheck.h - compares autograd gradients with central finite differences.
#pragma once

#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln::testing {

/// For f(inputs) -> Tensor, checks d(sum(w * f))/d(input) for every float
/// input against (L(x+eps) - L(x-eps)) / 2eps, with fixed random weights w
/// (as torch.autograd.gradcheck). By default float32 inputs are promoted to
/// float64 and checked with eps 1e-6 to 1e-6 relative to the largest gradient
/// entry; with in_float64 = false they stay float32 (pass a wider eps/tol).
inline void expect_gradients_match(const std::function<Tensor(const std::vector<Tensor> &)> &f,
                                   std::vector<Tensor> inputs, double eps = 1e-6, double tol = 1e-6,
                                   bool in_float64 = true) {
  for (Tensor &t : inputs)
    if (t.is_floating_point()) {
      if (in_float64) t = t.to(kFloat64).contiguous().clone();
      t.requires_grad_(true);
    }
  Tensor out = f(inputs);
  manual_seed(1234);
  Tensor w = randn(out.sizes()).to(out.dtype());
  std::vector<Tensor> grad_targets;
  for (Tensor &t : inputs)
    if (t.requires_grad()) grad_targets.push_back(t);
  auto analytic = autograd::grad({out}, {w}, grad_targets);
  auto loss_at = [&]() {
    NoGradGuard no_grad;
    auto o = f(inputs).to_vector<double>();
    auto wv = w.to_vector<double>();
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * wv[i];
    return s;
  };
  for (size_t k = 0; k < grad_targets.size(); ++k) {
    Tensor x = grad_targets[k];
    ASSERT_TRUE(x.is_contiguous());
    std::vector<double> numeric(static_cast<size_t>(x.numel()));
    auto perturb = [&](auto *p) {
      using T = std::remove_pointer_t<decltype(p)>;
      for (int64_t i = 0; i < x.numel(); ++i) {
        T orig = p[i];
        p[i] = orig + static_cast<T>(eps);
        double up = loss_at();
        p[i] = orig - static_cast<T>(eps);
        double down = loss_at();
        p[i] = orig;
        numeric[i] = (up - down) / (2 * eps);
      }
    };
    if (x.dtype() == kFloat64) perturb(x.data_ptr<double>());
    else perturb(x.data_ptr<float>());
    std::vector<double> got = analytic[k].defined() ? analytic[k].to_vector<double>()
                                                    : std::vector<double>(numeric.size(), 0.0);
    ASSERT_EQ(got.size(), numeric.size());
    double scale = 1.0;
    for (double v : numeric) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], numeric[i], tol * scale) << "input " << k << " element " << i;
  }
}

/// Values of `t` as doubles, for EXPECT comparisons.
inline std::vector<double> values(const Tensor &t) { return t.to_vector<double>(); }

}  // namespace kiln::testing
