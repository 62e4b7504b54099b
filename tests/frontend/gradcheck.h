// gradcheck.h - compares autograd gradients with central finite differences.
#pragma once

#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln::testing {

/// For f(inputs) -> Tensor, checks d(sum(w * f))/d(input) for every float
/// input against (L(x+eps) - L(x-eps)) / 2eps, with fixed random weights w.
/// float32 evaluation: eps 1e-3 and a tolerance of 1e-2 relative to the
/// largest gradient entry (plus 1e-3 absolute).
inline void expect_gradients_match(const std::function<Tensor(const std::vector<Tensor> &)> &f,
                                   std::vector<Tensor> inputs, double eps = 1e-3, double tol = 1e-2) {
  for (Tensor &t : inputs)
    if (t.is_floating_point()) t.requires_grad_(true);
  Tensor out = f(inputs);
  manual_seed(1234);
  Tensor w = randn(out.sizes());
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
    float *p = x.data_ptr<float>();
    std::vector<double> numeric(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      float orig = p[i];
      p[i] = orig + static_cast<float>(eps);
      double up = loss_at();
      p[i] = orig - static_cast<float>(eps);
      double down = loss_at();
      p[i] = orig;
      numeric[i] = (up - down) / (2 * eps);
    }
    std::vector<double> got = analytic[k].defined() ? analytic[k].to_vector<double>()
                                                    : std::vector<double>(numeric.size(), 0.0);
    ASSERT_EQ(got.size(), numeric.size());
    double scale = 1e-3;
    for (double v : numeric) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], numeric[i], tol * scale + 1e-3) << "input " << k << " element " << i;
  }
}

/// Values of `t` as doubles, for EXPECT comparisons.
inline std::vector<double> values(const Tensor &t) { return t.to_vector<double>(); }

}  // namespace kiln::testing
