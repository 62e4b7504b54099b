// kiln::compile guards, recompiles, the cache limit, and capture of random
// (dropout) and embedding ops, each checked against eager execution.
#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/runtime/Profiler.h"

namespace kiln {
namespace {

/// Linear -> dropout(p) -> Linear: dropout draws from the default generator.
struct DropoutNet : nn::Module {
  explicit DropoutNet(double p) : p(p) {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 4));
  }
  Tensor forward(const Tensor &x) override {
    return fc2->forward(nn::functional::dropout(relu(fc1->forward(x)), p, is_training()));
  }
  std::string name() const override { return "DropoutNet"; }
  double p;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

/// Token ids -> Embedding -> Linear.
struct EmbedNet : nn::Module {
  EmbedNet() {
    emb = register_module("emb", std::make_shared<nn::Embedding>(11, 6));
    fc = register_module("fc", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor &ids) override { return fc->forward(emb->forward(ids)); }
  std::string name() const override { return "EmbedNet"; }
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::Linear> fc;
};

void expect_close(const Tensor &a, const Tensor &b, double rtol, const std::string &what) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], rtol * (1 + std::abs(y[i]))) << what << "[" << i << "]";
}

TEST(CompileRandom, DropoutMasksMatchEagerWithSameSeed) {
  manual_seed(1);
  auto eager = std::make_shared<DropoutNet>(0.5);
  manual_seed(1);
  auto compiled = compile(std::make_shared<DropoutNet>(0.5));
  Tensor x = ones({5, 8});
  for (int step = 0; step < 3; ++step) {  // the tracing call, then cached calls
    manual_seed(100 + step);
    Tensor ye = eager->forward(x);
    Generator after_eager = default_generator();
    manual_seed(100 + step);
    Tensor yc = compiled->forward(x);
    expect_close(yc, ye, 1e-5, "output step " + std::to_string(step));
    EXPECT_EQ(default_generator().offset(), after_eager.offset()) << "compiled run consumed the generator differently";
    eager->zero_grad();
    compiled->zero_grad();
    ye.sum().backward();
    yc.sum().backward();
    expect_close(compiled->named_parameters()[0].second.grad(), eager->named_parameters()[0].second.grad(), 1e-5,
                 "fc1.weight grad");
  }
  EXPECT_EQ(compiled->stats().compiles, 1);
  // Different seeds give different masks through the cached artifact too.
  manual_seed(7);
  Tensor a = compiled->forward(x);
  manual_seed(8);
  Tensor b = compiled->forward(x);
  EXPECT_NE(a.to_vector<double>(), b.to_vector<double>());
}

TEST(CompileRandom, EmbeddingCompilesAndMatchesEager) {
  manual_seed(3);
  auto eager = std::make_shared<EmbedNet>();
  manual_seed(3);
  auto compiled = compile(std::make_shared<EmbedNet>());
  Tensor ids = tensor(std::vector<int64_t>{0, 3, 10, 3, 7, 1}, {6});
  for (int call = 0; call < 2; ++call) {
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye = eager->forward(ids), yc = compiled->forward(ids);
    expect_close(yc, ye, 1e-5, "output");
    (ye * ye).sum().backward();
    (yc * yc).sum().backward();
    expect_close(compiled->named_parameters()[0].second.grad(), eager->named_parameters()[0].second.grad(), 1e-5,
                 "emb.weight grad");
  }
  EXPECT_EQ(compiled->stats().compiles, 1);
}

TEST(CompileGuards, CacheLimitFallsBackToEagerOnce) {
  manual_seed(4);
  auto model = std::make_shared<nn::Linear>(3, 2);
  CompileOptions options;
  options.cache_size_limit = 2;
  options.automatic_dynamic_shapes = false;  // every batch size is a new static artifact
  auto compiled = compile(model, options);
  for (int64_t batch : {2, 3, 4, 5}) {
    Tensor x = rand({batch, 3});
    Tensor y = compiled->forward(x);
    expect_close(y, model->forward(x), 1e-6, "batch " + std::to_string(batch));
  }
  EXPECT_EQ(compiled->stats().compiles, 2);
  EXPECT_EQ(compiled->stats().eager_fallbacks, 2);
}

TEST(CompileGuards, TrainEvalAndGradModeAreGuards) {
  auto compiled = compile(std::make_shared<DropoutNet>(0.0));
  Tensor x = ones({2, 8});
  compiled->forward(x);
  compiled->forward(x);
  compiled->eval();
  compiled->forward(x);
  {
    NoGradGuard no_grad;
    compiled->forward(x);
  }
  EXPECT_EQ(compiled->stats().compiles, 3);
  EXPECT_EQ(compiled->stats().cache_hits, 1);
}

TEST(CompileExplain, ReportsFusionsMemoryPlanAndGuards) {
  manual_seed(6);
  auto compiled = compile(std::make_shared<DropoutNet>(0.25));
  std::string report = explain(*compiled, ones({4, 8}), /*print=*/false);
  EXPECT_NE(report.find("fusion groups ("), std::string::npos) << report;
  EXPECT_NE(report.find("fusion_0"), std::string::npos) << report;
  EXPECT_NE(report.find("memory plan: forward arena"), std::string::npos) << report;
  EXPECT_NE(report.find("backward arena"), std::string::npos) << report;
  EXPECT_NE(report.find("input[4, 8]:float32"), std::string::npos) << report;
  EXPECT_NE(report.find("random inputs (dropout masks): 1"), std::string::npos) << report;
  EXPECT_EQ(compiled->describe(ones({5, 8})), "");  // nothing compiled for that shape yet
}

TEST(CompileProfiler, WritesChromeTraceWithKernelsAndSteps) {
  auto &profiler = runtime::Profiler::instance();
  profiler.start();
  auto compiled = compile(std::make_shared<DropoutNet>(0.0));
  Tensor y = compiled->forward(ones({3, 8}));
  y.sum().backward();
  const std::string path = ::testing::TempDir() + "/kiln_trace.json";
  std::string error;
  ASSERT_TRUE(profiler.stop_and_write(path, &error)) << error;
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  const std::string trace = text.str();
  EXPECT_EQ(trace.rfind("{\"displayTimeUnit\"", 0), 0u) << trace.substr(0, 80);
  EXPECT_NE(trace.find("\"name\":\"forward CompiledDropoutNet\",\"cat\":\"step\",\"ph\":\"X\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\":\"backward CompiledDropoutNet\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\":\"fusion_"), std::string::npos);
  EXPECT_NE(trace.find("\"name\":\"gemm\""), std::string::npos);
  for (const auto &e : profiler.events()) EXPECT_GE(e.duration_us, 0.0) << e.name;
  const size_t n = profiler.events().size();
  compiled->forward(ones({3, 8}));  // stopped: nothing more is recorded
  EXPECT_EQ(profiler.events().size(), n);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(CompileGuards, AutocastStateIsAGuard) {
  manual_seed(4);
  auto model = std::make_shared<nn::Linear>(4, 3);
  auto compiled = compile(model);
  Tensor x = rand({2, 4});
  Tensor y32 = compiled->forward(x);
  EXPECT_EQ(y32.dtype(), kFloat32);
  Tensor y16;
  {
    AutocastGuard autocast(kBFloat16);
    y16 = compiled->forward(x);
    Tensor eager = model->forward(x);
    EXPECT_EQ(y16.dtype(), kBFloat16);
    EXPECT_EQ(y16.to_vector<double>(), eager.to_vector<double>());
  }
  EXPECT_EQ(compiled->stats().compiles, 2);
  compiled->forward(x);  // autocast off again: the first artifact
  EXPECT_EQ(compiled->stats().compiles, 2);
}


/// y = fc(x) * scale + offset: `scale` is a C++ member (baked in at trace
/// time), `offset` a registered 0-d buffer (read by reference every call).
struct ScaledNet : nn::Module {
  ScaledNet() {
    manual_seed(2);
    fc = register_module("fc", std::make_shared<nn::Linear>(5, 3));
    offset = register_buffer("offset", full({}, 0.5));
  }
  Tensor forward(const Tensor &x) override { return fc->forward(x) * scale + offset; }
  std::string name() const override { return "ScaledNet"; }
  void swap_fc(std::shared_ptr<nn::Linear> next) {
    fc = next;
    replace_module("fc", next);
  }
  double scale = 2.0;
  Tensor offset;
  std::shared_ptr<nn::Linear> fc;
};

void expect_same(const Tensor &got, const Tensor &want, const std::string &what) {
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5 + 1e-5 * std::abs(w[i])) << what << " [" << i << "]";
}

TEST(CompileGuards, GuardScalarsRecompileWhenAClosureScalarChanges) {
  auto inner = std::make_shared<ScaledNet>();
  CompileOptions options;
  options.guard_scalars = [inner] { return std::vector<double>{inner->scale}; };
  auto compiled = compile(inner, options);
  manual_seed(1);
  Tensor x = randn({4, 5});
  for (double scale : {2.0, 3.0, 2.0, -1.0}) {
    inner->scale = scale;
    expect_same(compiled->forward(x), inner->forward(x), "scale " + std::to_string(scale));
  }
  EXPECT_EQ(compiled->stats().compiles, 3);  // 2, 3 and -1; 2 again is a cache hit
}

TEST(CompileGuards, ABufferScalarUpdatedInPlaceNeedsNoRecompile) {
  auto inner = std::make_shared<ScaledNet>();
  auto compiled = compile(inner);
  manual_seed(1);
  Tensor x = randn({4, 5});
  for (double offset : {0.5, -2.0, 7.0}) {
    {
      NoGradGuard no_grad;
      inner->offset.fill_(offset);
    }
    expect_same(compiled->forward(x), inner->forward(x), "offset " + std::to_string(offset));
  }
  EXPECT_EQ(compiled->stats().compiles, 1);
}

TEST(CompileGuards, ReplacedOrResizedParametersRecompile) {
  auto inner = std::make_shared<ScaledNet>();
  auto compiled = compile(inner);
  manual_seed(1);
  Tensor x = randn({4, 5});
  expect_same(compiled->forward(x), inner->forward(x), "before");
  manual_seed(7);
  inner->swap_fc(std::make_shared<nn::Linear>(5, 3));  // new weights: the old artifact's are stale
  expect_same(compiled->forward(x), inner->forward(x), "after replace_module");
  inner->fc->bias.set_data(full({1}, 0.25));  // broadcastable bias of another shape
  expect_same(compiled->forward(x), inner->forward(x), "after set_data");
  EXPECT_EQ(compiled->stats().compiles, 3);
}

}  // namespace
}  // namespace kiln
