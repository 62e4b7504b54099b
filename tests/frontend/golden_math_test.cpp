// Golden values from PyTorch (tests/golden/math/gen_math.py) for the extra
// pointwise math, reductions and bmm: every case of math.json is one test
// (forward outputs and input gradients, in the case's dtype).
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

const char *kGoldenFile = "math/math.json";

const std::map<std::string, golden::Case> &all_cases() {
  static const auto cases = golden::load(kGoldenFile);
  return cases;
}

/// Case names straight from the JSON (read at test registration, so no
/// EXPECTs here); a missing file yields one case that fails.
std::vector<std::string> case_names() {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/tests/golden/" + kGoldenFile);
  if (!f.good()) return {"golden_file_missing"};
  std::vector<std::string> names;
  const nlohmann::json doc = nlohmann::json::parse(f);  // must outlive the loop below
  for (auto &[name, c] : doc.at("cases").items()) names.push_back(name);
  return names;
}

bool starts_with(const std::string &s, const char *prefix) { return s.rfind(prefix, 0) == 0; }

Shape dims_attr(const nlohmann::json &attrs) { return attrs.value("dims", Shape{}); }

/// f(x) on the input named "x".
Fn on_x(std::function<Tensor(const Tensor &)> f) {
  return [f](Inputs &in) { return std::vector<Tensor>{f(in.at("x"))}; };
}

/// f(x) -> (values, indices) on the input named "x".
Fn pair_on_x(std::function<std::pair<Tensor, Tensor>(const Tensor &)> f) {
  return [f](Inputs &in) {
    auto [values, indices] = f(in.at("x"));
    return std::vector<Tensor>{values, indices};
  };
}

/// The Kiln call for a pointwise case (name prefix = the op).
Fn pointwise_op(const std::string &name, const nlohmann::json &attrs) {
  if (starts_with(name, "abs")) return on_x([](const Tensor &x) { return abs(x); });
  if (starts_with(name, "rsqrt")) return on_x([](const Tensor &x) { return rsqrt(x); });
  if (starts_with(name, "tanh")) return on_x([](const Tensor &x) { return tanh(x); });
  if (starts_with(name, "sigmoid")) return on_x([](const Tensor &x) { return sigmoid(x); });
  if (starts_with(name, "silu")) return on_x([](const Tensor &x) { return silu(x); });
  if (starts_with(name, "gelu_tanh")) return on_x([](const Tensor &x) { return gelu(x, "tanh"); });
  if (starts_with(name, "gelu")) return on_x([](const Tensor &x) { return gelu(x); });
  if (starts_with(name, "sin")) return on_x([](const Tensor &x) { return sin(x); });
  if (starts_with(name, "cos")) return on_x([](const Tensor &x) { return cos(x); });
  if (starts_with(name, "clamp")) {
    const double lo = attrs.value("min", -INFINITY), hi = attrs.value("max", INFINITY);
    return on_x([lo, hi](const Tensor &x) { return clamp(x, lo, hi); });
  }
  if (starts_with(name, "masked_fill")) {
    const double value = attrs.at("value").get<double>();
    return [value](Inputs &in) { return std::vector<Tensor>{masked_fill(in.at("x"), in.at("mask"), value)}; };
  }
  return nullptr;
}

/// The Kiln call for a reduction or bmm case.
Fn reduction_op(const std::string &name, const nlohmann::json &attrs) {
  const Shape dims = dims_attr(attrs);
  const bool keepdim = attrs.value("keepdim", false);
  const int64_t correction = attrs.value("correction", int64_t{1});
  const int64_t dim = attrs.value("dim", int64_t{0});
  if (starts_with(name, "var"))
    return on_x([=](const Tensor &x) { return var(x, dims, correction, keepdim); });
  if (starts_with(name, "std"))
    return on_x([=](const Tensor &x) { return kiln::std(x, dims, correction, keepdim); });
  if (starts_with(name, "max")) return pair_on_x([=](const Tensor &x) { return max(x, dim, keepdim); });
  if (starts_with(name, "min")) return pair_on_x([=](const Tensor &x) { return min(x, dim, keepdim); });
  if (starts_with(name, "logsumexp")) return on_x([=](const Tensor &x) { return logsumexp(x, dims, keepdim); });
  if (starts_with(name, "cumsum")) return on_x([=](const Tensor &x) { return cumsum(x, dim); });
  if (starts_with(name, "bmm"))
    return [](Inputs &in) { return std::vector<Tensor>{bmm(in.at("input"), in.at("mat2"))}; };
  return nullptr;
}

class GoldenMath : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenMath, MatchesPyTorch) {
  const std::string &name = GetParam();
  auto it = all_cases().find(name);
  ASSERT_NE(it, all_cases().end()) << "no case " << name << " in " << kGoldenFile;
  const golden::Case &c = it->second;
  Fn fn = pointwise_op(name, c.attrs);
  if (!fn) fn = reduction_op(name, c.attrs);
  ASSERT_TRUE(fn) << "golden case " << name << " names no known op";
  golden::check_op(c, name, fn);
}

INSTANTIATE_TEST_SUITE_P(Math, GoldenMath, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string> &info) { return info.param; });

}  // namespace
}  // namespace kiln
