// Graph breaks: an op that cannot be captured splits the compiled graph; the
// pieces before and after run compiled, the op runs eagerly, and results and
// gradients equal eager execution.
#include <cmath>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "compare.h"

namespace kiln {
namespace {
using test_models::expect_close;
using test_models::expect_grads_close;

/// A data-dependent branch on .item(): the graph breaks at item().
struct Branchy : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Branchy() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(5, 8));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 3));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = relu(fc1->forward(x));
    // A Python-style data-dependent branch: which way depends on the values.
    if (x.mean().item() > 0.0) h = h * 2.0;
    else h = tanh(h) - 0.5;
    return fc2->forward(h);
  }
  std::string name() const override { return "Branchy"; }
};

/// A user callback in the middle of forward that reads values (argmax, on
/// the host) and feeds a tensor built from them back into the computation.
struct WithCallback : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  int calls = 0;
  double seen_sum = 0;
  WithCallback() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 6));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(6, 2));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = sigmoid(fc1->forward(x));
    Tensor top = argmax(h, 1, /*keepdim=*/true);  // int64 [N, 1], captured (kiln.argmax)
    seen_sum = top.sum().item();                   // the callback reads it on the host: breaks the graph
    ++calls;                                       // the callback's side effect
    Tensor bonus = top.to(kFloat32) * 0.1;         // data-dependent value, captured after the break
    return fc2->forward(h + bonus);
  }
  std::string name() const override { return "WithCallback"; }
};

template <class Model> void check_against_eager(std::shared_ptr<Model> eager, std::shared_ptr<Model> inner,
                                                const std::vector<Tensor> &inputs) {
  auto compiled = compile(inner);
  for (size_t call = 0; call < inputs.size(); ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const Tensor &x = inputs[call];
    eager->zero_grad();
    compiled->zero_grad();
    Tensor ye = eager->forward(x);
    Tensor yc = compiled->forward(x);
    expect_close(yc, ye, 1e-5, 1e-6, "output");
    Tensor r = cos(ye.detach());  // d loss / d output
    (ye * r).sum().backward();
    (yc * r).sum().backward();
    expect_grads_close(*eager, *compiled, 1e-5, 1e-6);
  }
}

TEST(CompileGraphBreak, ItemBranchRunsBothWaysAndMatchesEager) {
  auto make = [] {
    manual_seed(11);
    return std::make_shared<Branchy>();
  };
  auto inner = make();
  std::vector<Tensor> inputs;
  manual_seed(5);
  for (double shift : {2.0, -2.0, 2.0, -2.0}) inputs.push_back(randn({4, 5}) + shift);  // both branches, twice
  ::testing::internal::CaptureStderr();
  setenv("KILN_LOG", "graph_breaks", 1);
  check_against_eager(make(), inner, inputs);
  unsetenv("KILN_LOG");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("graph break in CompiledBranchy: op 'item'"), std::string::npos) << log;
}

TEST(CompileGraphBreak, SegmentsAreCompiledOnceAndReused) {
  manual_seed(11);
  auto compiled = compile(std::make_shared<Branchy>());
  manual_seed(5);
  Tensor hi = randn({4, 5}) + 2.0, lo = randn({4, 5}) - 2.0;
  compiled->forward(hi);
  EXPECT_EQ(compiled->graph_breaks(), std::vector<std::string>{"item"});
  const int after_first = compiled->stats().compiles;
  EXPECT_EQ(after_first, 2);  // the segments before and after item() (the failed whole-graph trace compiles nothing)
  compiled->forward(hi);
  EXPECT_EQ(compiled->stats().compiles, after_first);  // same path: all segments cached
  compiled->forward(lo);                               // the other branch: one new segment after the break
  EXPECT_EQ(compiled->stats().compiles, after_first + 1);
  compiled->forward(lo);
  EXPECT_EQ(compiled->stats().compiles, after_first + 1);
  std::string report = explain(*compiled, hi, /*print=*/false);
  EXPECT_NE(report.find("graph breaks: 1 (item)"), std::string::npos) << report;
  EXPECT_NE(report.find("segment 3: "), std::string::npos) << report;  // before item(), and after it on each branch
}

TEST(CompileGraphBreak, CallbackWithArgmaxMatchesEagerAndTrains) {
  auto make = [] {
    manual_seed(21);
    return std::make_shared<WithCallback>();
  };
  auto inner = make();
  std::vector<Tensor> inputs;
  manual_seed(6);
  for (int i = 0; i < 3; ++i) inputs.push_back(randn({5, 4}));
  check_against_eager(make(), inner, inputs);
  EXPECT_EQ(inner->calls, 3);  // the callback ran on every compiled call

  // Ten SGD steps: compiled and eager losses agree.
  auto eager = make();
  auto compiled = compile(make());
  optim::SGD opt_e(eager->parameters(), optim::SGDOptions(0.1));
  optim::SGD opt_c(compiled->parameters(), optim::SGDOptions(0.1));
  for (int step = 0; step < 10; ++step) {
    Tensor x = inputs[step % 3];
    double losses[2];
    int k = 0;
    for (auto &[model, opt] : std::vector<std::pair<nn::Module *, optim::Optimizer *>>{{eager.get(), &opt_e},
                                                                                        {compiled.get(), &opt_c}}) {
      opt->zero_grad();
      Tensor loss = (model->forward(x) * model->forward(x)).mean();
      loss.backward();
      opt->step();
      losses[k++] = loss.item();
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-5 * std::abs(losses[0])) << "step " << step;
  }
}

TEST(CompileGraphBreak, DropoutAcrossABreakUsesEagerMasks) {
  // Dropout before and after an item() break: with the same seed, the
  // compiled segments see the masks eager draws, in the same order.
  struct DropBranch : nn::Module {
    std::shared_ptr<nn::Linear> fc1, fc2;
    DropBranch() {
      fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 8));
      fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 2));
    }
    Tensor forward(const Tensor &x) override {
      Tensor h = nn::functional::dropout(relu(fc1->forward(x)), 0.3, is_training());
      if (h.sum().item() > 1.0) h = h * 0.5;
      return fc2->forward(nn::functional::dropout(h, 0.3, is_training()));
    }
    std::string name() const override { return "DropBranch"; }
  };
  manual_seed(8);
  auto eager = std::make_shared<DropBranch>();
  manual_seed(8);
  auto compiled = compile(std::make_shared<DropBranch>());
  Tensor x = randn({4, 6});
  for (uint64_t seed : {1, 2, 3}) {
    manual_seed(seed);
    Tensor ye = eager->forward(x);
    manual_seed(seed);
    Tensor yc = compiled->forward(x);
    expect_close(yc, ye, 1e-6, 1e-7, "seed " + std::to_string(seed));
  }
  EXPECT_EQ(compiled->graph_breaks(), std::vector<std::string>{"item"});
}

TEST(CompileGraphBreak, ValuesReadInsideASegmentAreReal) {
  // After the break, a value computed by the lazy segment is read on the
  // host (to_vector): the segment runs first, so the read sees real values.
  struct ReadsValues : nn::Module {
    std::vector<double> seen;
    Tensor forward(const Tensor &x) override {
      volatile double total = x.sum().item();     // a break (item), so the rest is a lazy segment
      (void)total;
      Tensor y = x.argmax(1).to(kFloat32) + 1.0;  // captured (kiln.argmax)
      Tensor z = y * 2.0;
      seen = z.to_vector<double>();
      return z + 1.0;
    }
    std::string name() const override { return "ReadsValues"; }
  };
  auto inner = std::make_shared<ReadsValues>();
  auto compiled = compile(inner);
  Tensor x = tensor(std::vector<float>{1, 5, 2, 7, 0, 3}, {2, 3});
  Tensor out = compiled->forward(x);  // whole-graph trace breaks at item()
  out = compiled->forward(x);         // lazy segments
  EXPECT_EQ(inner->seen, (std::vector<double>{4.0, 2.0}));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{5.0, 3.0}));
  EXPECT_EQ(compiled->graph_breaks(), (std::vector<std::string>{"item", "data read"}));
}

TEST(CompileGraphBreak, InferenceUnderNoGrad) {
  manual_seed(11);
  auto inner = std::make_shared<Branchy>();
  auto compiled = compile(inner);
  compiled->eval();
  NoGradGuard no_grad;
  manual_seed(5);
  for (double shift : {2.0, -2.0}) {
    Tensor x = randn({3, 5}) + shift;
    Tensor y = compiled->forward(x);
    EXPECT_FALSE(y.requires_grad());
    expect_close(y, inner->forward(x), 1e-6, 1e-7, "no_grad");
  }
}

}  // namespace
}  // namespace kiln
