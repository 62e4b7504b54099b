// conv2d, pooling, layer_norm, batch_norm and scaled_dot_product_attention
// against PyTorch golden values (tests/golden/conv/gen_conv.py): outputs and
// input gradients, float32 (1e-5 relative) and float64 (1e-10).
#include "../golden/golden.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using golden::Case;
using golden::get_or_undefined;
using golden::pair_attr;
using golden::TensorMap;

class GoldenConv : public ::testing::Test {
protected:
  static void SetUpTestSuite() { cases_ = new std::map<std::string, Case>(golden::load("conv/conv.json")); }
  static void TearDownTestSuite() { delete cases_; }

  /// Runs every case whose name starts with `prefix` (at least one must exist).
  void run_prefix(const std::string &prefix, const std::function<std::vector<Tensor>(const Case &, TensorMap &)> &fn) {
    int count = 0;
    for (auto &[name, c] : *cases_) {
      if (name.rfind(prefix, 0) != 0)
        continue;
      SCOPED_TRACE(name);
      const Case &cc = c;
      golden::check_op(c, name, [&](TensorMap &in) { return fn(cc, in); });
      ++count;
    }
    EXPECT_GT(count, 0) << "no golden cases named " << prefix << "*";
  }

  static std::map<std::string, Case> *cases_;
};
std::map<std::string, Case> *GoldenConv::cases_ = nullptr;

TEST_F(GoldenConv, Conv2d) {
  run_prefix("conv2d_", [](const Case &c, TensorMap &in) -> std::vector<Tensor> {
    return {F::conv2d(in["x"], in["weight"], get_or_undefined(in, "bias"), pair_attr(c, "stride"),
                      pair_attr(c, "padding"), pair_attr(c, "dilation"), c.attrs.at("groups").get<int64_t>())};
  });
}

TEST_F(GoldenConv, MaxPool2d) {
  run_prefix("max_pool2d_", [](const Case &c, TensorMap &in) -> std::vector<Tensor> {
    return {F::max_pool2d(in["x"], pair_attr(c, "kernel_size"), pair_attr(c, "stride"), pair_attr(c, "padding"))};
  });
}

TEST_F(GoldenConv, AvgPool2d) {
  run_prefix("avg_pool2d_", [](const Case &c, TensorMap &in) -> std::vector<Tensor> {
    return {F::avg_pool2d(in["x"], pair_attr(c, "kernel_size"), pair_attr(c, "stride"), pair_attr(c, "padding"))};
  });
}

TEST_F(GoldenConv, LayerNorm) {
  run_prefix("layer_norm_", [](const Case &c, TensorMap &in) -> std::vector<Tensor> {
    return {F::layer_norm(in["x"], c.attrs.at("normalized_shape").get<Shape>(), get_or_undefined(in, "weight"),
                          get_or_undefined(in, "bias"), c.attrs.at("eps").get<double>())};
  });
}

TEST_F(GoldenConv, BatchNormOutputAndRunningStats) {
  run_prefix("batch_norm_", [](const Case &c, TensorMap &in) -> std::vector<Tensor> {
    Tensor running_mean = in["running_mean"], running_var = in["running_var"];
    Tensor y =
        F::batch_norm(in["x"], running_mean, running_var, in["weight"], in["bias"], c.attrs.at("training").get<bool>(),
                      c.attrs.at("momentum").get<double>(), c.attrs.at("eps").get<double>());
    return {y, running_mean, running_var}; // out1/out2: the running stats after the update
  });
}

TEST_F(GoldenConv, ScaledDotProductAttention) {
  run_prefix("sdpa_", [](const Case &c, TensorMap &in) -> std::vector<Tensor> {
    return {F::scaled_dot_product_attention(in["q"], in["k"], in["v"], get_or_undefined(in, "mask"), 0.0,
                                            c.attrs.at("is_causal").get<bool>())};
  });
}

} // namespace
} // namespace kiln
