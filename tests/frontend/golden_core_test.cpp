// Core ops (elementwise, reductions, matmul, views, softmax, dtype
// conversion) against PyTorch golden values (tests/golden/core/gen_core.py).
#include "../golden/golden.h"

namespace kiln {
namespace {

using golden::check_op;
using In = std::map<std::string, Tensor>;
using Outs = std::vector<Tensor>;

const std::map<std::string, golden::Case> &cases() {
  static auto c = golden::load("core/core.json");
  return c;
}

const golden::Case &get(const std::string &name) {
  auto it = cases().find(name);
  if (it == cases().end()) throw Error("golden case missing: " + name);
  return it->second;
}

class GoldenCore : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenCore, ForwardAndBackward) {
  const std::string tag = GetParam();
  auto run = [&](const std::string &op, std::function<Outs(In &)> fn) { check_op(get(op + "_" + tag), op + "_" + tag, fn); };
  run("add_broadcast", [](In &x) { return Outs{x["a"] + x["b"]}; });
  run("sub_broadcast", [](In &x) { return Outs{x["a"] - x["b"]}; });
  run("mul", [](In &x) { return Outs{x["a"] * x["b"]}; });
  run("div", [](In &x) { return Outs{x["a"] / x["b"]}; });
  run("exp", [](In &x) { return Outs{exp(x["a"])}; });
  run("log", [](In &x) { return Outs{log(x["a"])}; });
  run("sqrt", [](In &x) { return Outs{sqrt(x["a"])}; });
  run("pow", [](In &x) { return Outs{pow(x["a"], 2.5)}; });
  run("neg", [](In &x) { return Outs{-x["a"]}; });
  run("relu", [](In &x) { return Outs{relu(x["a"])}; });
  run("maximum", [](In &x) { return Outs{maximum(x["a"], x["b"])}; });
  run("matmul", [](In &x) { return Outs{matmul(x["a"], x["b"])}; });
  run("sum_dims", [](In &x) { return Outs{x["a"].sum({0, 2})}; });
  run("mean_keepdim", [](In &x) { return Outs{x["a"].mean({1}, true)}; });
  run("amax", [](In &x) { return Outs{x["a"].amax({1})}; });
  run("softmax", [](In &x) { return Outs{nn::functional::softmax(x["a"], 1)}; });
  run("log_softmax", [](In &x) { return Outs{nn::functional::log_softmax(x["a"], -1)}; });
  run("linear_3d", [](In &x) { return Outs{nn::functional::linear(x["x"], x["w"], x["b"])}; });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GoldenCore, ::testing::Values("f32", "f64"));

TEST(GoldenCoreMisc, FileHoldsEveryCase) {
  EXPECT_EQ(cases().size(), 55u);  // tests/golden/core/core.json from gen_core.py
}

TEST(GoldenCoreMisc, MatmulShapesAndSums) {
  check_op(get("matmul_vector"), "matmul_vector", [](In &x) { return Outs{matmul(x["a"], x["b"])}; });
  check_op(get("sum_all"), "sum_all", [](In &x) { return Outs{x["a"].sum()}; });
  check_op(get("where"), "where", [](In &x) { return Outs{where(x["c"], x["a"], x["b"])}; });
}

TEST(GoldenCoreMisc, BatchedBroadcastMatmul) {
  check_op(get("matmul_batched_broadcast"), "matmul_batched_broadcast",
           [](In &x) { return Outs{matmul(x["a"], x["b"])}; });
}

TEST(GoldenCoreMisc, ViewChains) {
  check_op(get("view_permute_expand"), "view_permute_expand", [](In &x) {
    return Outs{x["a"].view({2, 6}).permute({1, 0}).reshape({3, 4}).unsqueeze(0).expand({2, 3, 4}) * 1.0};
  });
  check_op(get("narrow_transpose"), "narrow_transpose",
           [](In &x) { return Outs{x["a"].narrow(1, 1, 2).t().contiguous()}; });
}

TEST(GoldenCoreMisc, HalfPrecision) {
  check_op(get("to_float16"), "to_float16", [](In &x) { return Outs{x["a"].to(kFloat16).to(kFloat32)}; }, 0.0);
  check_op(get("to_bfloat16"), "to_bfloat16", [](In &x) { return Outs{x["a"].to(kBFloat16).to(kFloat32)}; }, 0.0);
  check_op(get("add_float16"), "add_float16", [](In &x) { return Outs{x["a"] + x["b"]}; });
  check_op(get("mul_bfloat16"), "mul_bfloat16", [](In &x) { return Outs{x["a"] * x["b"]}; });
  check_op(get("promote_f16_bf16"), "promote_f16_bf16", [](In &x) { return Outs{x["a"] + x["b"]}; });
}

TEST(GoldenCoreMisc, ComparisonsArgmaxPromotion) {
  const std::vector<std::pair<std::string, Tensor (*)(const Tensor &, const Tensor &)>> cmps = {
      {"eq", eq}, {"ne", ne}, {"lt", lt}, {"le", le}, {"gt", gt}, {"ge", ge}};
  for (auto &[name, fn] : cmps) {
    const auto &c = get("cmp_" + name);
    golden::expect_close(fn(c.inputs.at("a"), c.inputs.at("b")), c.outputs.at("out0"), name, 0.0);
  }
  const auto &am = get("argmax_dim1");
  golden::expect_close(am.inputs.at("a").argmax(1), am.outputs.at("out0"), "argmax", 0.0);
  const auto &pi = get("promote_int32_int64");
  golden::expect_close(pi.inputs.at("a") + pi.inputs.at("b"), pi.outputs.at("out0"), "int32+int64", 0.0);
}

}  // namespace
}  // namespace kiln
