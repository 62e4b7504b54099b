// The golden conv2d / pooling / batch_norm cases of golden_conv_test.cpp
// (tests/golden/conv/gen_conv.py, PyTorch values) through kiln::compile:
// the op wrapped in a module (x the compiled input, the other tensors
// captured), outputs and every input gradient against PyTorch, and no graph
// break. batch_norm's running statistics are buffer mutations the compiled
// call writes back.
#include <functional>
#include <memory>

#include "../golden/golden.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using golden::Case;
using golden::get_or_undefined;
using golden::pair_attr;
using golden::TensorMap;

/// forward(x) = fn(x): the op with its other tensors captured.
struct OpModule : nn::Module {
  std::function<Tensor(const Tensor &)> fn;
  explicit OpModule(std::function<Tensor(const Tensor &)> f) : fn(std::move(f)) {}
  Tensor forward(const Tensor &x) override { return fn(x); }
  std::string name() const override { return "OpModule"; }
};

/// Runs every case named `prefix`* with `op` compiled; `extra` (optional)
/// returns more outputs to compare (out1, ...) after the call.
void run_compiled(const std::string &prefix, const std::function<Tensor(const Case &, TensorMap &, const Tensor &)> &op,
                  const std::function<std::vector<Tensor>(TensorMap &)> &extra = nullptr) {
  static const std::map<std::string, Case> cases = golden::load("conv/conv.json");
  int count = 0;
  for (const auto &[name, c] : cases) {
    if (name.rfind(prefix, 0) != 0) continue;
    SCOPED_TRACE(name);
    std::shared_ptr<CompiledModule> compiled;
    golden::check_op(c, name, [&](TensorMap &in) {
      compiled = compile(std::make_shared<OpModule>([&c, &in, &op](const Tensor &x) { return op(c, in, x); }));
      std::vector<Tensor> outs{compiled->forward(in["x"])};
      if (extra)
        for (const Tensor &t : extra(in)) outs.push_back(t);
      return outs;
    });
    EXPECT_TRUE(compiled->graph_breaks().empty()) << compiled->graph_breaks().front();
    EXPECT_EQ(compiled->stats().compiles, 1);
    EXPECT_EQ(compiled->stats().eager_fallbacks, 0);
    ++count;
  }
  EXPECT_GT(count, 0) << "no golden cases named " << prefix << "*";
}

TEST(GoldenConvCompiled, Conv2d) {
  run_compiled("conv2d_", [](const Case &c, TensorMap &in, const Tensor &x) {
    return F::conv2d(x, in["weight"], get_or_undefined(in, "bias"), pair_attr(c, "stride"), pair_attr(c, "padding"),
                     pair_attr(c, "dilation"), c.attrs.at("groups").get<int64_t>());
  });
}

TEST(GoldenConvCompiled, MaxPool2d) {
  run_compiled("max_pool2d_", [](const Case &c, TensorMap &, const Tensor &x) {
    return F::max_pool2d(x, pair_attr(c, "kernel_size"), pair_attr(c, "stride"), pair_attr(c, "padding"));
  });
}

TEST(GoldenConvCompiled, AvgPool2d) {
  run_compiled("avg_pool2d_", [](const Case &c, TensorMap &, const Tensor &x) {
    return F::avg_pool2d(x, pair_attr(c, "kernel_size"), pair_attr(c, "stride"), pair_attr(c, "padding"));
  });
}

TEST(GoldenConvCompiled, BatchNormOutputAndRunningStats) {
  run_compiled(
      "batch_norm_",
      [](const Case &c, TensorMap &in, const Tensor &x) {
        return F::batch_norm(x, in["running_mean"], in["running_var"], in["weight"], in["bias"],
                             c.attrs.at("training").get<bool>(), c.attrs.at("momentum").get<double>(),
                             c.attrs.at("eps").get<double>());
      },
      [](TensorMap &in) { return std::vector<Tensor>{in["running_mean"], in["running_var"]}; });
}

} // namespace
} // namespace kiln
