// Wrong results of kiln::compile found by trying it as a new user would
// (issue 11, point 7), mostly around graph breaks. Every expected value comes
// from eager execution of the same module: compiled must equal eager.
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/runtime/Allocator.h"
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

}  // namespace
}  // namespace kiln
