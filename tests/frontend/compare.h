// compare.h - element-wise tensor comparison shared by the compile tests.
#pragma once

#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln::test_models {

/// Element-wise |got - want| <= atol + rtol |want| (same shape).
inline void expect_close(const Tensor &got, const Tensor &want, double rtol, double atol, const std::string &what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], atol + rtol * std::abs(w[i])) << what << " [" << i << "]";
}

/// Every parameter gradient of `compiled` (a CompiledModule, parameters in
/// the same order) close to the same parameter's gradient of `eager`.
inline void expect_grads_close(nn::Module &eager, nn::Module &compiled, double rtol, double atol) {
  auto pe = eager.named_parameters(), pc = compiled.named_parameters();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t i = 0; i < pe.size(); ++i) {
    ASSERT_TRUE(pc[i].second.grad().defined()) << pc[i].first;
    expect_close(pc[i].second.grad(), pe[i].second.grad(), rtol, atol, "grad of " + pe[i].first);
  }
}

}  // namespace kiln::test_models
