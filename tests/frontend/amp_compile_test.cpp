// kiln::compile of a model called under autocast: the casts eager autocast
// inserts are ordinary Tensor::to ops, so the tracer records them as
// conversions and the compiled forward/backward match eager autocast.
// (The autocast state is a guard: CompileGuards.AutocastStateIsAGuard.)
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

struct LinearSoftmax : nn::Module {
  LinearSoftmax() {
    lin = std::make_shared<nn::Linear>(8, 6);
    register_module("lin", lin);
  }
  Tensor forward(const Tensor &x) override { return nn::functional::softmax(lin->forward(x), 1); }
  std::string name() const override { return "LinearSoftmax"; }
  std::shared_ptr<nn::Linear> lin;
};

TEST(AmpCompile, CompiledAutocastModelMatchesEagerAutocast) {
  manual_seed(1);
  auto eager = std::make_shared<LinearSoftmax>();
  manual_seed(1);
  auto compiled = compile(std::make_shared<LinearSoftmax>());
  manual_seed(2);
  Tensor x = randn({4, 8});
  for (int call = 0; call < 2; ++call) {  // the trace call and a cached call
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye, yc;
    {
      AutocastGuard autocast(kBFloat16);
      ye = eager->forward(x);
      yc = compiled->forward(x);
    }
    ASSERT_EQ(ye.dtype(), kFloat32);  // softmax is an fp32 op
    ASSERT_EQ(yc.dtype(), kFloat32);
    auto a = ye.to_vector<float>(), b = yc.to_vector<float>();
    EXPECT_EQ(compiled->stats().compiles, 1);
    // Both round the linear's result to bfloat16 (the compiled matmul runs in
    // float32 between the traced conversions; eager's bfloat16 GEMM also
    // accumulates in float32): measured 3e-8 apart. A float32 run differs
    // by ~6e-4, which shows the casts were captured.
    Tensor y32 = eager->forward(x);  // no autocast: float32 all the way
    auto c = y32.to_vector<float>();
    double to_f32 = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(b[i], a[i], 1e-6) << i;
      to_f32 = std::max(to_f32, static_cast<double>(std::abs(c[i] - b[i])));
    }
    EXPECT_GT(to_f32, 1e-4);
    (ye * ye).sum().backward();
    (yc * yc).sum().backward();
    auto ge = eager->lin->weight.grad().to_vector<float>();
    auto gc = compiled->original().parameters()[0].grad().to_vector<float>();
    ASSERT_EQ(compiled->original().parameters()[0].grad().dtype(), kFloat32);
    double scale = 0.0;
    for (float g : ge) scale = std::max(scale, static_cast<double>(std::abs(g)));
    for (size_t i = 0; i < ge.size(); ++i) EXPECT_NEAR(gc[i], ge[i], 1e-5 * scale) << i;
  }
}

}  // namespace
}  // namespace kiln
