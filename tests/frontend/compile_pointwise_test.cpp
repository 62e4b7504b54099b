// The ops of issue 13 part C under kiln::compile: captured without a graph
// break (kiln.erf, kiln.floor ..., kiln.maximum, kiln.argmax, kiln.cumsum
// ...), and compiled forward and gradients equal to eager.
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "compare.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {
using test_models::expect_close;
using test_models::expect_grads_close;

/// x [4, 6] -> [4, 6] through `fn(h, w)` with h = x * w (w a [6] parameter).
struct PointwiseProgram : nn::Module {
  using Fn = std::function<Tensor(const Tensor &, const Tensor &)>;
  Fn fn;
  Tensor w;
  explicit PointwiseProgram(Fn f) : fn(std::move(f)) {
    manual_seed(5);
    w = register_parameter("w", randn({6}) * 0.5 + 1.0);
  }
  Tensor forward(const Tensor &x) override { return fn(x * w, w); }
  std::string name() const override { return "PointwiseProgram"; }
};

/// Compiled vs eager on three inputs: outputs, parameter gradients (of
/// sum(y * y)), no graph breaks.
void expect_captured_and_equal(const PointwiseProgram::Fn &fn, double rtol = 1e-5) {
  auto eager = std::make_shared<PointwiseProgram>(fn);
  auto inner = std::make_shared<PointwiseProgram>(fn);
  auto compiled = compile(inner);
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    manual_seed(40 + call);
    Tensor x = randn({4, 6}) * 3.0;
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye = eager->forward(x), yc = compiled->forward(x);
    expect_close(yc, ye, rtol, rtol, "forward");
    (ye * ye).sum().backward();
    (yc * yc).sum().backward();
    expect_grads_close(*eager, *compiled, rtol, rtol);
    EXPECT_TRUE(compiled->graph_breaks().empty()) << compiled->graph_breaks().front();
  }
}

TEST(CompilePointwise, ErfAndExactGelu) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) { return erf(h * 0.3) + gelu(h); });
}

TEST(CompilePointwise, Roundings) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) {
    return floor(h) + ceil(h * 0.5) * 2.0 + round(h * 2.0) + trunc(h) * 3.0 + h;
  });
}

TEST(CompilePointwise, DivisionModesAndRemainders) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &w) {
    Tensor d = w + 0.25;
    return floor_divide(h, d) + div(h, d, "trunc") + remainder(h, d) * 2.0 + fmod(h, d) * 3.0;
  });
}

TEST(CompilePointwise, IntegerDivisionModes) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) {
    Tensor i = (h * 4.0).to(kInt64);
    Tensor d = tensor(std::vector<int64_t>{3, 2, 1, -1, -2, -3}, {6});
    Tensor q = floor_divide(i, d) + div(i, d, "trunc") * 10 + remainder(i, d) * 100 + fmod(i, d) * 1000;
    return q.to(kFloat32) * 0.001 + h;
  });
}

TEST(CompilePointwise, MaximumMinimumClamp) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &w) {
    return maximum(h, w) + min(h * 0.5, w) + clamp_min(h, 0.2) + clamp(h, std::nullopt, 0.4);
  });
}

TEST(CompilePointwise, ArgReductionsAndMaxWithIndices) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) {
    auto [values, indices] = max(h, 1, /*keepdim=*/true);
    auto [low, where_low] = min(h, 0);
    Tensor picks = argmax(h, 1, true).to(kFloat32) + argmin(h, 0).to(kFloat32) + argmax(h).to(kFloat32);
    return h * values + low + picks + indices.to(kFloat32) + where_low.to(kFloat32) + max(h) - min(h) +
           amin(h, {1}, true);
  });
}

TEST(CompilePointwise, Cumsum) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) { return cumsum(h, 1) + cumsum(h * h, 0); });
}

} // namespace
} // namespace kiln

namespace kiln {
namespace {

struct XFn : nn::Module {
  std::function<Tensor(const Tensor &)> fn;
  explicit XFn(std::function<Tensor(const Tensor &)> f) : fn(std::move(f)) {}
  Tensor forward(const Tensor &x) override { return fn(x); }
  std::string name() const override { return "XFn"; }
};

/// kiln-fuzz --seed 1883430438073930 --graph 164: the gradient through
/// max()/min() of a view of the input, at two batch sizes.
TEST(CompilePointwise, MaxMinAllDimsOfAViewAcrossBatchSizes) {
  auto fn = [](const Tensor &x) {
    Tensor v = chunk(x, 2, 0)[1];
    return v * max(v) - min(v);
  };
  auto compiled = compile(std::make_shared<XFn>(fn));
  for (int64_t batch : {3, 5, 5, 4}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    manual_seed(7 + batch);
    Tensor x = randn({batch, 4, 5});
    Tensor xe = x.clone(), xc = x.clone();
    xe.requires_grad_(true);
    xc.requires_grad_(true);
    Tensor w = randn(fn(x).sizes());
    (fn(xe) * w).sum().backward();
    (compiled->forward(xc) * w).sum().backward();
    expect_close(xc.grad(), xe.grad(), 1e-5, 1e-5, "x.grad");
  }
}

}  // namespace
}  // namespace kiln
