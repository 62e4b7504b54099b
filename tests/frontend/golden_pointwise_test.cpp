// Golden values from PyTorch (tests/golden/pointwise/gen_pointwise.py) for
// the ops of issue 13 part C: erf, floor/ceil/round/trunc, div with
// rounding modes, remainder, fmod, maximum/minimum, one-sided clamp,
// max()/min() over all dims, argmax/argmin, cumsum. Every case of
// pointwise.json is one test (outputs and input gradients).
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../golden/golden.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using Inputs = std::map<std::string, Tensor>;
using Fn = std::function<std::vector<Tensor>(Inputs &)>;

const char *kGoldenFile = "pointwise/pointwise.json";

const std::map<std::string, golden::Case> &all_cases() {
  static const auto cases = golden::load(kGoldenFile);
  return cases;
}

std::vector<std::string> case_names() {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/tests/golden/" + kGoldenFile);
  if (!f.good())
    return {"golden_file_missing"};
  std::vector<std::string> names;
  const nlohmann::json doc = nlohmann::json::parse(f);
  for (auto &[name, c] : doc.at("cases").items())
    names.push_back(name);
  return names;
}

bool starts_with(const std::string &s, const char *prefix) { return s.rfind(prefix, 0) == 0; }

Fn on_x(std::function<Tensor(const Tensor &)> f) {
  return [f](Inputs &in) { return std::vector<Tensor>{f(in.at("x"))}; };
}

Fn on_xy(std::function<Tensor(const Tensor &, const Tensor &)> f) {
  return [f](Inputs &in) { return std::vector<Tensor>{f(in.at("x"), in.at("y"))}; };
}

/// Elementwise cases (name prefix = the op).
Fn elementwise_op(const std::string &name, const nlohmann::json &attrs) {
  if (starts_with(name, "erf"))
    return on_x([](const Tensor &x) { return erf(x); });
  if (starts_with(name, "floor_divide"))
    return on_xy([](const Tensor &x, const Tensor &y) { return floor_divide(x, y); });
  if (starts_with(name, "div_trunc"))
    return on_xy([](const Tensor &x, const Tensor &y) { return div(x, y, "trunc"); });
  if (starts_with(name, "floor"))
    return on_x([](const Tensor &x) { return floor(x); });
  if (starts_with(name, "ceil"))
    return on_x([](const Tensor &x) { return ceil(x); });
  if (starts_with(name, "round"))
    return on_x([](const Tensor &x) { return round(x); });
  if (starts_with(name, "trunc"))
    return on_x([](const Tensor &x) { return trunc(x); });
  if (starts_with(name, "remainder"))
    return on_xy([](const Tensor &x, const Tensor &y) { return remainder(x, y); });
  if (starts_with(name, "fmod"))
    return on_xy([](const Tensor &x, const Tensor &y) { return fmod(x, y); });
  if (starts_with(name, "maximum"))
    return on_xy([](const Tensor &x, const Tensor &y) { return maximum(x, y); });
  if (starts_with(name, "minimum"))
    return on_xy([](const Tensor &x, const Tensor &y) { return min(x, y); });
  if (starts_with(name, "clamp_min")) {
    const double lo = attrs.at("min").get<double>();
    return on_x([lo](const Tensor &x) { return clamp_min(x, lo); });
  }
  if (starts_with(name, "clamp_max")) {
    const double hi = attrs.at("max").get<double>();
    return on_x([hi](const Tensor &x) { return clamp(x, std::nullopt, hi); });
  }
  return nullptr;
}

/// Reduction and scan cases.
Fn reduction_op(const std::string &name, const nlohmann::json &attrs) {
  const int64_t dim = attrs.value("dim", int64_t{0});
  const bool keepdim = attrs.value("keepdim", false);
  const bool all = attrs.value("all", false);
  if (starts_with(name, "max_all"))
    return on_x([](const Tensor &x) { return max(x); });
  if (starts_with(name, "min_all"))
    return on_x([](const Tensor &x) { return min(x); });
  if (starts_with(name, "max_dim"))
    return [dim](Inputs &in) {
      auto [values, indices] = max(in.at("x"), dim);
      return std::vector<Tensor>{values, indices};
    };
  if (starts_with(name, "argmax"))
    return on_x([=](const Tensor &x) { return all ? argmax(x) : argmax(x, dim, keepdim); });
  if (starts_with(name, "argmin"))
    return on_x([=](const Tensor &x) { return all ? argmin(x) : argmin(x, dim, keepdim); });
  if (starts_with(name, "cumsum"))
    return on_x([dim](const Tensor &x) { return cumsum(x, dim); });
  return nullptr;
}

class GoldenPointwise : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenPointwise, MatchesPyTorch) {
  const std::string &name = GetParam();
  auto it = all_cases().find(name);
  ASSERT_NE(it, all_cases().end()) << "no case " << name << " in " << kGoldenFile;
  const golden::Case &c = it->second;
  Fn fn = elementwise_op(name, c.attrs);
  if (!fn)
    fn = reduction_op(name, c.attrs);
  ASSERT_TRUE(fn) << "golden case " << name << " names no known op";
  golden::check_op(c, name, fn);
}

INSTANTIATE_TEST_SUITE_P(Pointwise, GoldenPointwise, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string> &info) { return info.param; });

// Signed zeros survive rounding and the division family, as in PyTorch
// (the golden files' -0.0 compares equal to 0.0, so the sign is checked here).
TEST(PointwiseSignedZero, RoundingAndRemaindersKeepTheSign) {
  Tensor x = tensor({-0.5f, -0.0f, -0.4f}, {3});
  for (const Tensor &r : {round(x), trunc(x), ceil(x)})
    for (float v : r.to_vector<float>())
      EXPECT_TRUE(std::signbit(v)) << v;
  EXPECT_TRUE(std::signbit(remainder(tensor({-6.f}, {1}), tensor({3.f}, {1})).item()));
  EXPECT_TRUE(std::signbit(floor_divide(tensor({-0.f}, {1}), tensor({2.f}, {1})).item()));
  EXPECT_FALSE(std::signbit(minimum(tensor({0.f}, {1}), tensor({-0.f}, {1})).item())); // the first on a tie
}

TEST(PointwiseErrors, IntegerDivisionByZeroRaises) {
  Tensor a = tensor(std::vector<int64_t>{4, 5}, {2}), b = tensor(std::vector<int64_t>{2, 0}, {2});
  for (auto fn : {+[](const Tensor &x, const Tensor &y) { return floor_divide(x, y); },
                  +[](const Tensor &x, const Tensor &y) { return div(x, y, "trunc"); },
                  +[](const Tensor &x, const Tensor &y) { return remainder(x, y); },
                  +[](const Tensor &x, const Tensor &y) { return fmod(x, y); }}) {
    try {
      fn(a, b);
      ADD_FAILURE() << "no error";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("ZeroDivisionError"), std::string::npos) << e.what();
    }
  }
  // Floats divide by zero as IEEE.
  EXPECT_TRUE(std::isinf(floor_divide(tensor({1.f}, {1}), tensor({0.f}, {1})).item()));
}

TEST(PointwiseErrors, BadArgumentsNameTheOp) {
  Tensor x = tensor({1.f, 2.f}, {2});
  EXPECT_THROW(div(x, x, "round"), Error);
  EXPECT_THROW(clamp(x, std::nullopt, std::nullopt), Error);
  EXPECT_THROW(max(Tensor::empty({0})), Error);
  EXPECT_THROW(argmin(Tensor::empty({0})), Error);
}

} // namespace
} // namespace kiln
