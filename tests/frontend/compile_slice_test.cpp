// Slicing views and joins under kiln::compile (issue 13): narrow, slice with
// a step, chunk, split, select, unbind, cat and stack are captured without a graph
// break (a window is a kiln.gather, its gradient and cat are
// kiln.scatter_add), and compiled forward and gradients equal eager; so is
// nn::MultiheadAttention, which narrows its packed in_proj weight.
#include <functional>

#include <gtest/gtest.h>

#include "compare.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {
using test_models::expect_close;
using test_models::expect_grads_close;

/// x [4, 6] -> `fn(h, w)` with h = x * w (w a [6] parameter).
struct SliceProgram : nn::Module {
  using Fn = std::function<Tensor(const Tensor &, const Tensor &)>;
  Fn fn;
  Tensor w;
  explicit SliceProgram(Fn f) : fn(std::move(f)) {
    manual_seed(5);
    w = register_parameter("w", randn({6}) * 0.5 + 1.0);
  }
  Tensor forward(const Tensor &x) override { return fn(x * w, w); }
  std::string name() const override { return "SliceProgram"; }
};

/// Compiled vs eager on three inputs: outputs, the gradient of w (of
/// sum(y * y * c) with c a fixed ramp, so every position weighs
/// differently), no graph breaks.
void expect_captured_and_equal(const SliceProgram::Fn &fn) {
  auto eager = std::make_shared<SliceProgram>(fn);
  auto compiled = compile(std::make_shared<SliceProgram>(fn));
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    manual_seed(40 + call);
    Tensor x = randn({4, 6});
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye = eager->forward(x), yc = compiled->forward(x);
    expect_close(yc, ye, 1e-5, 1e-5, "forward");
    Tensor c = arange(ye.numel(), kFloat32).reshape(ye.sizes()) * 0.1 + 1.0;
    (ye * ye * c).sum().backward();
    (yc * yc * c).sum().backward();
    expect_grads_close(*eager, *compiled, 1e-5, 1e-5);
    EXPECT_TRUE(compiled->graph_breaks().empty()) << compiled->graph_breaks().front();
  }
}

TEST(CompileSlice, Narrow) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &w) {
    return h.narrow(0, 1, 2).narrow(1, 1, 3) * 2.0 + h.narrow(0, 2, 2).narrow(1, 0, 3) + w.narrow(0, 3, 3);
  });
}

TEST(CompileSlice, NarrowOfATransposedView) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) { return h.t().narrow(0, 1, 4).narrow(1, 1, 2) * 3.0; });
}

TEST(CompileSlice, SliceWithStep) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) {
    return slice(h, 1, 0, 6, 2) + slice(h, 1, 1, 6, 2) * 2.0 + slice(h, 0, 1, 4, 3).sum();
  });
}

TEST(CompileSlice, ChunkSplit) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) {
    std::vector<Tensor> c = chunk(h, 3, 1);
    std::vector<Tensor> s = split(h, 3, 0);
    return c[0] * c[1] + c[2] + s[1].narrow(1, 0, 2) + s[0].narrow(0, 1, 1).narrow(1, 4, 2);
  });
}

TEST(CompileSlice, SelectUnbind) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &) {
    std::vector<Tensor> rows = unbind(h, 0);
    return rows[1] * 2.0 + select(h, 0, -1) + select(h, 1, 2).sum();
  });
}

TEST(CompileSlice, Cat) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &w) {
    Tensor a = cat({h, h * 2.0, tanh(h)}, 0);  // [12, 6]
    Tensor b = cat({h.narrow(1, 0, 2), w.reshape({1, 6}).expand({4, 6})}, 1);  // [4, 8]
    return matmul(b.t(), a.narrow(0, 0, 4));
  });
}

TEST(CompileSlice, Stack) {
  expect_captured_and_equal([](const Tensor &h, const Tensor &w) {
    return stack({h, h * w, relu(h)}, 1).sum({2}) + stack({w, w * w}, 0).sum();
  });
}

TEST(CompileSlice, MultiheadAttentionHasNoGraphBreaks) {
  manual_seed(9);
  auto eager = std::make_shared<nn::MultiheadAttention>(16, 4);
  manual_seed(9);
  auto compiled = compile(std::make_shared<nn::MultiheadAttention>(16, 4));
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    manual_seed(60 + call);
    Tensor x = randn({2, 5, 16});
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye = eager->forward(x), yc = compiled->forward(x);
    expect_close(yc, ye, 1e-4, 1e-5, "forward");
    (ye * ye).sum().backward();
    (yc * yc).sum().backward();
    expect_grads_close(*eager, *compiled, 1e-4, 1e-5);
    EXPECT_TRUE(compiled->graph_breaks().empty()) << compiled->graph_breaks().front();
  }
}

}  // namespace
}  // namespace kiln
