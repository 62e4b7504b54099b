// Automatic dynamic shapes: after one recompile for a changed batch size, the
// batch dim is symbolic and every later size reuses the shape-generic
// kernels; results must equal eager at every size.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "compare.h"
#include "tiny_models.h"

namespace kiln {
namespace {
using test_models::expect_close;
using test_models::expect_grads_close;

/// Linear -> ReLU -> Dropout -> Linear, then the mean of the squares: the
/// mean's 1/N depends on the batch size (a runtime scalar of a generic kernel).
struct MeanSquareMlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
  MeanSquareMlp() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.25));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = fc2->forward(drop->forward(relu(fc1->forward(x))));
    return (h * h).mean();
  }
  std::string name() const override { return "MeanSquareMlp"; }
};

/// Runs eager and compiled copies on batch sizes `sizes` (same seed per call,
/// so dropout masks agree) and compares outputs and parameter gradients.
template <class Make>
void check_sizes(Make make, const std::vector<int64_t> &sizes, std::function<Tensor(int64_t)> input,
                 CompiledModule **out_compiled, std::shared_ptr<CompiledModule> *keep) {
  auto eager = make();
  auto compiled = compile(make());
  for (int64_t b : sizes) {
    SCOPED_TRACE("batch " + std::to_string(b));
    Tensor x = input(b);
    eager->zero_grad();
    compiled->zero_grad();
    manual_seed(1000 + b);
    Tensor ye = eager->forward(x);
    Tensor re = randn(ye.sizes());
    (ye * re).sum().backward();
    manual_seed(1000 + b);
    Tensor yc = compiled->forward(x);
    Tensor rc = randn(yc.sizes());
    (yc * rc).sum().backward();
    expect_close(yc, ye, 1e-5, 1e-6, "output");
    expect_grads_close(*eager, *compiled, 1e-4, 1e-6);
  }
  *keep = compiled;
  *out_compiled = compiled.get();
}

TEST(CompileDynamic, BatchSizes4To12CompileTwiceWithMeanAndDropout) {
  std::vector<int64_t> sizes;
  for (int64_t b = 4; b <= 12; ++b) sizes.push_back(b);
  CompiledModule *compiled = nullptr;
  std::shared_ptr<CompiledModule> keep;
  check_sizes(
      [] {
        manual_seed(3);
        return std::make_shared<MeanSquareMlp>();
      },
      sizes, [](int64_t b) { return randn({b, 6}); }, &compiled, &keep);
  ASSERT_TRUE(compiled);
  EXPECT_EQ(compiled->stats().compiles, 2);                // 4 (static), then 5 (dim 0 dynamic)
  EXPECT_EQ(compiled->stats().dynamic_instantiations, 7);  // 6..12 reuse the generic kernels
  EXPECT_EQ(compiled->stats().eager_fallbacks, 0);
  // A size seen before is a plain cache hit.
  manual_seed(1);
  compiled->forward(randn({7, 6}));
  EXPECT_EQ(compiled->stats().dynamic_instantiations, 7);
  // explain names the symbolic dim.
  std::string report = explain(*compiled, randn({9, 6}), /*print=*/false);
  EXPECT_NE(report.find("dynamic shapes: input dim 0 is symbolic s"), std::string::npos) << report;
  EXPECT_NE(report.find("recompile 1: input shape [4, 6] -> [5, 6]; dim 0 is now dynamic"), std::string::npos) << report;
}

TEST(CompileDynamic, TinyGptVaryingBatchMatchesEager) {
  const int64_t V = 12, T = 8;
  CompiledModule *compiled = nullptr;
  std::shared_ptr<CompiledModule> keep;
  check_sizes(
      [&] {
        manual_seed(77);
        return std::make_shared<test_models::TinyGPT>(V, T, 16);
      },
      {4, 5, 9, 12}, [&](int64_t b) {
        Generator gen(static_cast<uint64_t>(b));
        std::vector<int64_t> ids(b * T);
        for (auto &v : ids) v = gen.next4()[0] % V;
        return tensor(ids, {b, T});
      }, &compiled, &keep);
  ASSERT_TRUE(compiled);
  EXPECT_EQ(compiled->stats().compiles, 2);
  EXPECT_EQ(compiled->stats().dynamic_instantiations, 2);
}

/// Row fusions (layer_norm, softmax, log_softmax, each forward and
/// backward one row-tiled kernel) with a dynamic row count.
struct RowOps : nn::Module {
  std::shared_ptr<nn::LayerNorm> norm;
  Tensor pos;
  RowOps() {
    norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{16}));
    pos = register_parameter("pos", randn({4, 16}));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = norm->forward(x + pos);
    return nn::functional::softmax(h, -1) + nn::functional::log_softmax(h * 0.5, -1);
  }
  std::string name() const override { return "RowOps"; }
};

TEST(CompileDynamic, RowKernelsVaryingBatchMatchEager) {
  CompiledModule *compiled = nullptr;
  std::shared_ptr<CompiledModule> keep;
  check_sizes(
      [] {
        manual_seed(5);
        return std::make_shared<RowOps>();
      },
      {4, 5, 9}, [](int64_t b) { return randn({b, 4, 16}); }, &compiled, &keep);
  ASSERT_TRUE(compiled);
  EXPECT_EQ(compiled->stats().compiles, 2);
  EXPECT_EQ(compiled->stats().dynamic_instantiations, 1);
}

TEST(CompileDynamic, InferenceUnderNoGradVaryingBatch) {
  manual_seed(3);
  auto inner = std::make_shared<MeanSquareMlp>();
  auto compiled = compile(inner);
  compiled->eval();
  NoGradGuard no_grad;
  for (int64_t b : {3, 4, 9, 17}) {
    Tensor x = randn({b, 6});
    expect_close(compiled->forward(x), inner->forward(x), 1e-5, 1e-7, "batch " + std::to_string(b));
  }
  EXPECT_EQ(compiled->stats().compiles, 2);
  EXPECT_EQ(compiled->stats().dynamic_instantiations, 2);
}

TEST(CompileDynamic, RowKernelsOnEdgeShapesMatchEager) {
  // One row, rows of one element, a row dim of size 1 between others: each
  // shape is compiled on its own and checked against eager, outputs and
  // gradients.
  struct Norm : nn::Module {
    std::shared_ptr<nn::LayerNorm> norm;
    explicit Norm(int64_t c) { norm = register_module("norm", std::make_shared<nn::LayerNorm>(Shape{c})); }
    Tensor forward(const Tensor &x) override {
      return nn::functional::softmax(norm->forward(x), -1) + nn::functional::log_softmax(x, -1);
    }
    std::string name() const override { return "Norm"; }
  };
  for (const Shape &shape : {Shape{1, 16}, Shape{3, 1, 16}, Shape{1, 1, 5}, Shape{4, 2}}) {
    SCOPED_TRACE(shape_str(shape));
    CompiledModule *compiled = nullptr;
    std::shared_ptr<CompiledModule> keep;
    check_sizes(
        [&] {
          manual_seed(9);
          return std::make_shared<Norm>(shape.back());
        },
        {shape[0]},
        [&](int64_t b) {
          Shape s = shape;
          s[0] = b;
          return randn(s);
        },
        &compiled, &keep);
  }
}

TEST(CompileDynamic, DisabledKeepsStaticShapes) {
  manual_seed(3);
  CompileOptions options;
  options.automatic_dynamic_shapes = false;
  auto compiled = compile(std::make_shared<MeanSquareMlp>(), options);
  for (int64_t b : {4, 5, 6}) compiled->forward(randn({b, 6}));
  EXPECT_EQ(compiled->stats().compiles, 3);
  EXPECT_EQ(compiled->stats().dynamic_instantiations, 0);
}

TEST(CompileDynamic, TwoChangedDimsStayStatic) {
  manual_seed(3);
  struct Sum : nn::Module {
    Tensor forward(const Tensor &x) override { return (x * x).sum(); }
    std::string name() const override { return "Sum"; }
  };
  auto compiled = compile(std::make_shared<Sum>());
  Tensor a = randn({4, 5}), b = randn({6, 7});
  compiled->forward(a);
  Tensor y = compiled->forward(b);
  EXPECT_NEAR(y.item(), (b * b).sum().item(), 1e-4);
  EXPECT_EQ(compiled->stats().compiles, 2);
  // Now only dim 1 changes against [6, 7]: dynamic from here on.
  Tensor c = randn({6, 9}), d = randn({6, 11});
  EXPECT_NEAR(compiled->forward(c).item(), (c * c).sum().item(), 1e-4);
  EXPECT_NEAR(compiled->forward(d).item(), (d * d).sum().item(), 1e-4);
  EXPECT_EQ(compiled->stats().compiles, 3);
  EXPECT_EQ(compiled->stats().dynamic_instantiations, 1);
}

}  // namespace
}  // namespace kiln
