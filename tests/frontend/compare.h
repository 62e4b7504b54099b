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

}  // namespace kiln::test_models
