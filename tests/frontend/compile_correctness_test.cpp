// Wrong results of kiln::compile found by trying it as a new user would
// (issue 11, point 7), mostly around graph breaks. Every expected value comes
// from eager execution of the same module: compiled must equal eager.
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/runtime/Allocator.h"
#include "bad_cases.h"
#include "compare.h"

namespace kiln {
namespace {
using test_models::expect_close;
using TL = autograd::TensorList;

/// A module whose forward is a function of (input, the module): one class
/// for the many small programs below. Parameters: `w` [6, 6], `v` [6].
struct Program : nn::Module {
  using Fn = std::function<Tensor(const Tensor &, Program &)>;
  Fn fn;
  Tensor w, v;
  explicit Program(Fn f) : fn(std::move(f)) {
    manual_seed(3);
    w = register_parameter("w", randn({6, 6}) * 0.4);
    v = register_parameter("v", randn({6}) * 0.4);
  }
  Tensor forward(const Tensor &x) override { return fn(x, *this); }
  std::string name() const override { return "Program"; }
};

/// A graph break that leaves the values alone (item() of a sum).
Tensor graph_break(const Tensor &x) {
  volatile double seen = x.sum().item();
  (void)seen;
  return x;
}

/// Runs `fn` eagerly and compiled on `calls` inputs [4, 6] (requires grad when
/// `input_grad`), backward through sum(y * cos(y)); compares outputs, input
/// gradients and parameter gradients (undefined must stay undefined).
void expect_compiled_equals_eager(const Program::Fn &fn, bool input_grad = true, int calls = 3) {
  auto eager = std::make_shared<Program>(fn);
  auto compiled = compile(std::make_shared<Program>(fn));
  for (int call = 0; call < calls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    manual_seed(100 + call);
    Tensor x = randn({4, 6});
    Tensor xe = x.clone(), xc = x.clone();
    if (input_grad) xe.requires_grad_(true), xc.requires_grad_(true);
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye = eager->forward(xe);
    Tensor yc = compiled->forward(xc);
    expect_close(yc, ye, 1e-5, 1e-6, "output");
    if (!ye.requires_grad()) {
      EXPECT_FALSE(yc.requires_grad());
      continue;
    }
    Tensor r = cos(ye.detach());
    (ye * r).sum().backward();
    (yc * r).sum().backward();
    if (input_grad) {
      ASSERT_EQ(xc.grad().defined(), xe.grad().defined()) << "input grad";
      if (xe.grad().defined()) expect_close(xc.grad(), xe.grad(), 1e-5, 1e-6, "input grad");
    }
    auto pe = eager->named_parameters(), pc = compiled->named_parameters();
    for (size_t i = 0; i < pe.size(); ++i) {
      ASSERT_EQ(pc[i].second.grad().defined(), pe[i].second.grad().defined()) << pe[i].first;
      if (pe[i].second.grad().defined())
        expect_close(pc[i].second.grad(), pe[i].second.grad(), 1e-5, 1e-6, "grad of " + pe[i].first);
    }
  }
}

// ---- autograd::checkpoint inside a compiled model ---------------------------------

Tensor checkpointed_mlp(const Tensor &x, Program &m) {
  Tensor h = autograd::checkpoint([&m](const TL &in) { return tanh(matmul(in[0], m.w) + m.v); }, {x});
  return h * 2.0;
}

TEST(CompileCorrectness, CheckpointGivesParameterGradientsOnCachedCalls) {
  expect_compiled_equals_eager(checkpointed_mlp, /*input_grad=*/false, 3);
  expect_compiled_equals_eager(checkpointed_mlp, /*input_grad=*/true, 3);
}

TEST(CompileCorrectness, TracingWritesNoGradients) {
  auto compiled = compile(std::make_shared<Program>(checkpointed_mlp));
  compiled->zero_grad();
  manual_seed(1);
  compiled->forward(randn({4, 6}));  // traces forward + backward, compiles
  for (const auto &[name, p] : compiled->named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;
}

// ---- parameters without a gradient -------------------------------------------------

TEST(CompileCorrectness, ParameterWithoutGradientStaysUndefined) {
  auto uses_w_only = [](const Tensor &x, Program &m) { return tanh(matmul(x, m.w)); };
  expect_compiled_equals_eager(uses_w_only, /*input_grad=*/false);
  expect_compiled_equals_eager(uses_w_only, /*input_grad=*/true);
  // The same after a graph break (segments).
  expect_compiled_equals_eager([](const Tensor &x, Program &m) { return tanh(matmul(graph_break(x), m.w)); });
  // A value computed before a graph break and never used: its segment has
  // it as an output, but no gradient reaches v through it (found by kiln-fuzz,
  // seed 11, graphs 6, 21, 64, 79, 81).
  expect_compiled_equals_eager([](const Tensor &x, Program &m) {
    Tensor unused = x * m.v;
    Tensor y = graph_break(tanh(matmul(x, m.w)));
    return y * 2.0;
  });
  // An input that does not reach the output gets no gradient either.
  expect_compiled_equals_eager([](const Tensor &x, Program &m) { return tanh(m.w) + 0.0 * x.sum().detach(); });
}

// ---- graph-break segments ------------------------------------------------------------

TEST(CompileCorrectness, DetachInSegmentStopsGradients) {
  // Eager: d/dx (2x + x.detach()) = 2 (the "dx 3 where eager gives 2").
  expect_compiled_equals_eager([](const Tensor &x, Program &) {
    Tensor y = graph_break(x) * 1.0;
    return y * 2.0 + y.detach();
  });
  expect_compiled_equals_eager([](const Tensor &x, Program &) {
    Tensor y = graph_break(x);
    return y * 2.0 + y.detach();  // detach of a segment input
  });
  expect_compiled_equals_eager([](const Tensor &x, Program &m) {
    Tensor y = matmul(graph_break(x), m.w);
    return y + m.w.detach().sum() * y.detach();
  });
}

TEST(CompileCorrectness, NoGradRegionInsideForwardAfterABreak) {
  // Values computed under the user's NoGradGuard carry no gradient, whether
  // the region holds only recorded ops or a graph-break op too.
  expect_compiled_equals_eager([](const Tensor &x, Program &m) {
    Tensor h = matmul(graph_break(x), m.w);
    Tensor target;
    {
      NoGradGuard no_grad;
      target = tanh(h) * 2.0;
    }
    return h * target;
  });
  expect_compiled_equals_eager([](const Tensor &x, Program &m) {
    Tensor h = matmul(graph_break(x), m.w);
    Tensor g;
    {
      NoGradGuard no_grad;
      g = gelu(h) + m.v;
    }
    return h * g;
  });
}

TEST(CompileCorrectness, CloneThenInPlaceSeesTheUpdate) {
  auto no_grad_programs = std::vector<Program::Fn>{
      [](const Tensor &x, Program &) {
        Tensor h = graph_break(x) * 2.0;
        Tensor c = h.clone();
        c.add_(ones({4, 6}), 1.0);
        return c * 3.0 + h;
      },
      [](const Tensor &x, Program &) {
        Tensor c = graph_break(x).clone();  // clone of a segment input
        c.mul_(2.0);
        return c + x;
      },
      [](const Tensor &x, Program &) {
        Tensor z = cat({x * 1.0, x * 2.0}, 0);  // cat runs eagerly: z is real
        Tensor c = z.clone();
        c.mul_(2.0);
        return c + 1.0;
      },
      [](const Tensor &x, Program &) {
        Tensor c = graph_break(x).t().contiguous();  // a copy of a view of an input
        c.add_(ones({6, 4}), -1.0);
        return c * 1.0;
      },
  };
  for (size_t i = 0; i < no_grad_programs.size(); ++i) {
    SCOPED_TRACE("program " + std::to_string(i));
    expect_compiled_equals_eager(no_grad_programs[i], /*input_grad=*/false);
  }
}

TEST(CompileCorrectness, StridedViewsEnterSegmentsWithTheirLayout) {
  auto programs = std::vector<Program::Fn>{
      [](const Tensor &x, Program &) { return x.narrow(1, 1, 3) * 2.0 + 1.0; },
      [](const Tensor &x, Program &) { return slice(x * 1.0, 1, 0, 6, 2) * 2.0; },
      [](const Tensor &x, Program &) { return graph_break(x).t() * 3.0; },
      [](const Tensor &x, Program &m) { return matmul(slice(x, 0, 1, 4, 2).t(), slice(x, 0, 0, 4, 2)) + m.w; },
      [](const Tensor &x, Program &) {
        Tensor t = (x * 2.0).t();
        return t.narrow(0, 2, 3) + 1.0;  // a view of a value the segment computes
      },
      // contiguous()/clone() of a real strided view: the copy reads its layout
      [](const Tensor &x, Program &) { return (x * 2.0).narrow(1, 1, 3).contiguous() * 1.0; },
      [](const Tensor &x, Program &) { return slice(x * 2.0, 1, 0, 6, 2).clone(); },
      [](const Tensor &x, Program &) { return (x * 2.0).narrow(0, 1, 2).t().reshape({-1}) * 2.0; },
      [](const Tensor &x, Program &m) { return matmul(slice(x, 1, 0, 6, 2), slice(m.w, 0, 0, 6, 2)); },
  };
  for (size_t i = 0; i < programs.size(); ++i) {
    SCOPED_TRACE("program " + std::to_string(i));
    expect_compiled_equals_eager(programs[i]);
  }
}

TEST(CompileCorrectness, SegmentFlushDoesNotBumpVersions) {
  // gelu (a graph break) saves its input h; a view of h recorded in the next
  // segment is live at the following flush and gets its value then, which
  // must not count as an in-place update of the saved h.
  expect_compiled_equals_eager([](const Tensor &x, Program &m) {
    Tensor h = matmul(x, m.w);
    Tensor g = gelu(h);
    Tensor hv = h.reshape({6, 4});
    graph_break(g);
    return hv.reshape({4, 6}) * g;
  });
  expect_compiled_equals_eager([](const Tensor &x, Program &) {
    Tensor h = x * 1.0;
    Tensor g = gelu(h);
    Tensor ht = h.t();
    graph_break(g);
    return ht.t() * g;
  });
}


// ---- autograd::checkpoint after a graph break ------------------------------------

/// Four tanh layers [N, 256] after a graph break, each checkpointed or not.
struct DeepAfterBreak : nn::Module {
  bool checkpointed;
  std::vector<Tensor> ws;
  explicit DeepAfterBreak(bool checkpoint) : checkpointed(checkpoint) {
    manual_seed(4);
    for (int i = 0; i < 4; ++i) ws.push_back(register_parameter("w" + std::to_string(i), randn({256, 256}) * 0.06));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = graph_break(x);
    for (const Tensor &w : ws) {
      auto layer = [w](const TL &in) { return tanh(matmul(tanh(matmul(in[0], w)), w)); };
      h = checkpointed ? autograd::checkpoint(layer, {h}) : layer({h});
    }
    return h;
  }
  std::string name() const override { return "DeepAfterBreak"; }
};

/// Peak bytes allocated above the starting point over forward + backward.
int64_t step_peak_bytes(nn::Module &model, const Tensor &x) {
  auto &alloc = runtime::cpu_allocator();
  const int64_t before = alloc.stats().current_bytes;
  alloc.reset_peak_stats();
  model.zero_grad();
  model.forward(x).sum().backward();
  return alloc.stats().peak_bytes - before;
}

TEST(CompileCorrectness, CheckpointAfterGraphBreakRecomputesInBackward) {
  manual_seed(9);
  Tensor x = randn({512, 256});
  auto plain = compile(std::make_shared<DeepAfterBreak>(false));
  auto checkpointed = compile(std::make_shared<DeepAfterBreak>(true));
  DeepAfterBreak eager_checkpointed(true);
  for (int call = 0; call < 2; ++call) {  // the first call traces; the second runs the cached segments
    step_peak_bytes(*plain, x);
    step_peak_bytes(*checkpointed, x);
  }
  const int64_t plain_peak = step_peak_bytes(*plain, x), checkpointed_peak = step_peak_bytes(*checkpointed, x);
  const int64_t eager_peak = step_peak_bytes(eager_checkpointed, x);
  const int64_t activation = 512 * 256 * 4;  // one [512, 256] float32 value
  // Checkpointed segments hold nothing but their inputs between forward and
  // backward, as eager checkpointing: no more memory than eager's.
  EXPECT_LT(checkpointed_peak, plain_peak) << "eager " << eager_peak;
  EXPECT_LE(checkpointed_peak, eager_peak + activation / 4) << "plain " << plain_peak;
  std::printf("peak bytes: compiled %lld, compiled + checkpoint %lld, eager + checkpoint %lld; saved %lld / %lld\n",
              static_cast<long long>(plain_peak), static_cast<long long>(checkpointed_peak),
              static_cast<long long>(eager_peak), static_cast<long long>(plain->stats().saved_bytes),
              static_cast<long long>(checkpointed->stats().saved_bytes));
  EXPECT_EQ(checkpointed->stats().saved_bytes, 0);
  EXPECT_GT(plain->stats().saved_bytes, 4 * activation);
  EXPECT_GT(checkpointed->stats().recompute_flops, 4 * 2 * 512 * 256 * 256);  // the matmuls at least
  // memory_budget applies to segments too, and the stats sum the call's segments.
  CompileOptions budget0;
  budget0.memory_budget = 0.0;
  auto recompute_all = compile(std::make_shared<DeepAfterBreak>(false), budget0);
  step_peak_bytes(*recompute_all, x);
  EXPECT_EQ(recompute_all->stats().saved_bytes, 0);
  EXPECT_GT(recompute_all->stats().recompute_flops, checkpointed->stats().recompute_flops / 2);
  // Gradients equal eager checkpointing.
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    eager_checkpointed.zero_grad();
    checkpointed->zero_grad();
    (eager_checkpointed.forward(x) * 1.5).sum().backward();
    (checkpointed->forward(x) * 1.5).sum().backward();
    test_models::expect_grads_close(eager_checkpointed, *checkpointed, 2e-3, 2e-5);
  }
  expect_compiled_equals_eager([](const Tensor &x, Program &m) {
    Tensor h = graph_break(x);
    return autograd::checkpoint([&m](const TL &in) { return tanh(matmul(in[0], m.w) + m.v); }, {h}) * 2.0;
  });
}

// ---- recompiles of segments --------------------------------------------------------

TEST(CompileCorrectness, ItemConstantRecompilesAreBoundedAndExplained) {
  auto fn = [](const Tensor &x, Program &m) {
    Tensor h = relu(matmul(x, m.w));
    const double scale = h.mean().item();  // a host value used as a constant: a new segment graph each call
    return h * scale + m.v;
  };
  auto eager = std::make_shared<Program>(fn);
  CompileOptions options;
  options.cache_size_limit = 3;
  auto compiled = compile(std::make_shared<Program>(fn), options);
  setenv("KILN_LOG", "recompiles", 1);
  ::testing::internal::CaptureStderr();
  for (int call = 0; call < 20; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    manual_seed(200 + call);
    Tensor x = randn({4, 6});
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye = eager->forward(x), yc = compiled->forward(x);
    expect_close(yc, ye, 1e-5, 1e-6, "output");
    ye.sum().backward();
    yc.sum().backward();
    test_models::expect_grads_close(*eager, *compiled, 1e-5, 1e-6);
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  unsetenv("KILN_LOG");
  // The segment before item() once, the one after it up to the limit; then eager.
  EXPECT_EQ(compiled->stats().compiles, 1 + 3);
  EXPECT_EQ(compiled->stats().eager_fallbacks, 20 - 3);
  EXPECT_NE(log.find("recompiled because the constant of op"), std::string::npos) << log;
  size_t warnings = 0;
  for (size_t at = log.find("warning: segment 2"); at != std::string::npos; at = log.find("warning: segment 2", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << log;
  const std::string report = explain(*compiled, randn({4, 6}), /*print=*/false);
  EXPECT_NE(report.find("recompile 1: segment 2: the constant of op"), std::string::npos) << report;
}


// ---- bad and unusual inputs on the compiled path (issue 11, point 6) --------------

/// Same NaN/Inf positions and equal finite values.
void expect_same_values(const Tensor &got, const Tensor &want, const std::string &what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " [" << i << "] = " << g[i] << ", eager NaN";
    } else if (std::isinf(w[i])) {
      EXPECT_EQ(g[i], w[i]) << what << " [" << i << "]";
    } else {
      EXPECT_NEAR(g[i], w[i], 1e-5 + 1e-5 * std::abs(w[i])) << what << " [" << i << "]";
    }
  }
}

/// Calls eager and compiled (cached: a warm-up call on `warmup` first) on
/// `x`, with gradients when x requires grad; outputs and gradients equal.
void expect_cached_call_equals_eager(const Program::Fn &fn, const Tensor &warmup, const Tensor &x,
                                     const std::string &what) {
  SCOPED_TRACE(what);
  auto eager = std::make_shared<Program>(fn);
  auto compiled = compile(std::make_shared<Program>(fn));
  compiled->forward(warmup);
  Tensor xe = x.detach().clone(), xc = x.detach().clone();
  if (x.requires_grad()) xe.requires_grad_(true), xc.requires_grad_(true);
  Tensor ye = eager->forward(xe), yc = compiled->forward(xc);
  expect_same_values(yc, ye, "output");
  if (!ye.requires_grad() || ye.numel() == 0) return;
  ye.sum().backward();
  yc.sum().backward();
  if (x.requires_grad()) expect_same_values(xc.grad(), xe.grad(), "input grad");
  expect_same_values(compiled->named_parameters()[0].second.grad(), eager->named_parameters()[0].second.grad(),
                     "grad of w");
}

Tensor linear_tanh(const Tensor &x, Program &m) { return tanh(matmul(x, m.w) + m.v); }

TEST(CompileBadInputs, CachedCallsWithWrongInputsThrowTheEagerError) {
  using test_support::BadCase;
  auto compiled = compile(std::make_shared<Program>(linear_tanh));
  manual_seed(1);
  compiled->forward(randn({4, 6}));  // compiled and cached for [4, 6] float32
  test_support::expect_kiln_errors({
      BadCase{"wrong inner size", [&] { compiled->forward(randn({4, 7})); }, {"matmul", "[4, 7]", "[6, 6]"}},
      BadCase{"wrong rank", [&] { compiled->forward(randn({2, 4, 7})); }, {"matmul", "[2, 4, 7]"}},
      BadCase{"0-d input", [&] { compiled->forward(full({}, 1.0)); }, {"matmul"}},
      BadCase{"integer input", [&] { compiled->forward(ones({4, 6}, kInt64)); }, {"int64"}},
      BadCase{"undefined input", [&] { compiled->forward(Tensor()); }, {"undefined"}},
  });
  EXPECT_EQ(compiled->forward(randn({4, 6})).sizes(), (Shape{4, 6}));  // still serves its guard key
}

TEST(CompileBadInputs, UnusualInputsGiveEagerResults) {
  manual_seed(2);
  const Tensor warm = randn({4, 6});
  Tensor x = randn({4, 6});
  auto with_grad = [](Tensor t) { return t.requires_grad_(true); };
  // NaN and Inf propagate as in eager (ops whose NaN rules are settled).
  Tensor special = tensor(std::vector<float>{NAN, INFINITY, -INFINITY, 1, 2, 3}, {1, 6}).expand({4, 6}).contiguous();
  expect_cached_call_equals_eager([](const Tensor &t, Program &m) { return matmul(t, m.w) + exp(t) * 2.0; }, warm,
                                  special, "NaN/Inf input");
  expect_cached_call_equals_eager(linear_tanh, warm, randn({6, 4}).t(), "transposed input");
  expect_cached_call_equals_eager(linear_tanh, warm, randn({1, 6}).expand({4, 6}), "expanded (stride 0) input");
  expect_cached_call_equals_eager(linear_tanh, warm, slice(randn({8, 6}), 0, 0, 8, 2), "sliced input");
  expect_cached_call_equals_eager(linear_tanh, warm, with_grad(randn({6, 4})).t(), "transposed input with grad");
  expect_cached_call_equals_eager(linear_tanh, warm, zeros({0, 6}), "batch size 0");
  expect_cached_call_equals_eager(linear_tanh, warm, with_grad(zeros({0, 6})), "batch size 0 with grad");
  expect_cached_call_equals_eager([](const Tensor &t, Program &) { return t * t + matmul(t, t.t()).sum(); },
                                  warm, with_grad(x.clone()), "the same tensor as both operands");
  expect_cached_call_equals_eager(linear_tanh, warm, randn({4, 6}).to(kFloat64), "float64 input");
  expect_cached_call_equals_eager([](const Tensor &t, Program &m) { return (t * 4.0).to(kInt32).to(kFloat32) * m.v; },
                                  warm, x, "int32 values inside forward (no int32 in the kiln dialect: eager)");
  expect_cached_call_equals_eager(linear_tanh, warm, with_grad(randn({6})), "rank 1 input");
  expect_cached_call_equals_eager(linear_tanh, warm, with_grad(randn({2, 3, 6})), "rank 3 input");
}

TEST(CompileBadInputs, InputThatIsAViewOfAParameter) {
  auto fn = [](const Tensor &x, Program &m) { return matmul(x, m.w) * m.v; };
  auto eager = std::make_shared<Program>(fn);
  auto compiled = compile(std::make_shared<Program>(fn));
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye = eager->forward(eager->w.t()), yc = compiled->forward(compiled->named_parameters()[0].second.t());
    expect_same_values(yc, ye, "output");
    ye.sum().backward();
    yc.sum().backward();
    expect_same_values(compiled->named_parameters()[0].second.grad(), eager->w.grad(), "grad of w");
    expect_same_values(compiled->named_parameters()[1].second.grad(), eager->v.grad(), "grad of v");
  }
}

TEST(CompileBadInputs, InPlaceUpdateOfTheInputInsideForward) {
  auto fn = [](const Tensor &x, Program &m) {
    Tensor y = x;
    y.mul_(2.0);  // modifies the caller's tensor, as in eager
    return matmul(y, m.w);
  };
  auto eager = std::make_shared<Program>(fn);
  auto compiled = compile(std::make_shared<Program>(fn));
  manual_seed(3);
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    Tensor x = randn({4, 6});
    Tensor xe = x.clone(), xc = x.clone();
    expect_same_values(compiled->forward(xc), eager->forward(xe), "output");
    expect_same_values(xc, xe, "the input after the call");
  }
  // An input that requires grad cannot be updated in place, compiled or not.
  test_support::expect_kiln_errors({
      test_support::BadCase{"in-place on an input that requires grad",
                            [&] { compiled->forward(randn({4, 6}).requires_grad_(true)); },
                            {"mul_", "in-place update of a tensor that requires grad"}},
  });
}

}  // namespace
}  // namespace kiln
