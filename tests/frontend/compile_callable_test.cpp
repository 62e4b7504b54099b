// kiln::compile of any callable: functions with several tensor and
// non-tensor arguments and several outputs, modules with the vector forward,
// the parameters of modules a function captures (found, guarded, their
// gradients in .grad), graph breaks with several inputs, and the errors for
// bad calls. The reference is always the same code run eagerly.
#include <cmath>
#include <cstdlib>
#include <tuple>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "compare.h"

namespace kiln {
namespace {
namespace F = nn::functional;
using test_models::expect_close;

constexpr double kRtol = 1e-4, kAtol = 1e-5;

/// A BERT-style encoder block without embeddings: single-head self-attention
/// with a float padding mask [B, T] (1 keeps a key, 0 masks it) added to the
/// scores, post-norm residuals, a tanh-GELU MLP, and a token classifier.
/// forward({x [B, T, D], mask [B, T]}) -> {logits [B, T, C], loss []}, the
/// loss the cross-entropy of the logits against the `labels` buffer.
struct BertBlock : nn::Module {
  static constexpr int64_t B = 2, T = 5, D = 8, C = 3;
  std::shared_ptr<nn::Linear> q, k, v, fc1, fc2, head;
  std::shared_ptr<nn::LayerNorm> norm1, norm2;
  Tensor labels;
  BertBlock() {
    q = register_module("q", std::make_shared<nn::Linear>(D, D));
    k = register_module("k", std::make_shared<nn::Linear>(D, D));
    v = register_module("v", std::make_shared<nn::Linear>(D, D));
    norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(Shape{D}));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(D, 2 * D));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(2 * D, D));
    norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(Shape{D}));
    head = register_module("head", std::make_shared<nn::Linear>(D, C));
    labels = register_buffer("labels", tensor(std::vector<int64_t>{0, 1, 2, 1, 0, 2, 2, 1, 0, 1}, {B * T}));
  }
  std::vector<Tensor> forward(const std::vector<Tensor> &in) override {
    const Tensor &x = in.at(0), &mask = in.at(1);
    Tensor scores = matmul(q->forward(x), k->forward(x).transpose(1, 2)) * (1.0 / std::sqrt(double(D)));
    scores = scores + ((mask - 1.0) * 1e4).reshape({B, 1, T});
    Tensor h = norm1->forward(x + matmul(F::softmax(scores, -1), v->forward(x)));
    h = norm2->forward(h + fc2->forward(gelu(fc1->forward(h), "tanh")));
    Tensor logits = head->forward(h);
    return {logits, F::cross_entropy(logits.reshape({B * T, C}), labels)};
  }
  std::string name() const override { return "BertBlock"; }
};

/// A padding mask: the first `len[b]` positions of row b are kept.
Tensor padding_mask(int64_t len0, int64_t len1) {
  std::vector<float> m;
  for (int64_t len : {len0, len1})
    for (int64_t t = 0; t < BertBlock::T; ++t) m.push_back(t < len ? 1.0f : 0.0f);
  return tensor(m, {BertBlock::B, BertBlock::T});
}

void expect_same_grads(nn::Module &eager, nn::Module &compiled, const std::string &what) {
  auto pe = eager.named_parameters(), pc = compiled.named_parameters();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t i = 0; i < pe.size(); ++i) {
    ASSERT_TRUE(pc[i].second.grad().defined()) << what << ": " << pc[i].first;
    expect_close(pc[i].second.grad(), pe[i].second.grad(), kRtol, kAtol, what + ": grad of " + pe[i].first);
  }
}

/// 20 AdamW steps of `run(model, x, mask) -> {logits, loss}` against eager;
/// odd steps differentiate loss + mean(logits), so both outputs carry a
/// gradient into the one compiled backward.
template <class Run> void train_bert_against_eager(Run run_compiled, BertBlock &compiled_model) {
  manual_seed(0);
  auto eager = std::make_shared<BertBlock>();
  optim::AdamW eager_opt(eager->parameters(), optim::AdamWOptions(1e-2));
  optim::AdamW compiled_opt(compiled_model.parameters(), optim::AdamWOptions(1e-2));
  for (int step = 0; step < 20; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    manual_seed(100 + step);
    Tensor x = randn({BertBlock::B, BertBlock::T, BertBlock::D});
    Tensor mask = padding_mask(BertBlock::T - step % 3, 2 + step % 2);
    std::vector<Tensor> want = eager->forward({x, mask});
    std::vector<Tensor> got = run_compiled(x, mask);
    ASSERT_EQ(got.size(), 2u);
    expect_close(got[0], want[0], kRtol, kAtol, "logits");
    expect_close(got[1], want[1], kRtol, kAtol, "loss");
    eager_opt.zero_grad();
    compiled_opt.zero_grad();
    if (step % 2) {
      (want[1] + want[0].mean()).backward();
      (got[1] + got[0].mean()).backward();
    } else {
      want[1].backward();
      got[1].backward();
    }
    expect_same_grads(*eager, compiled_model, "step " + std::to_string(step));
    eager_opt.step();
    compiled_opt.step();
  }
}

TEST(CompileCallable, TwoInputTwoOutputModuleMatchesEagerFor20Steps) {
  manual_seed(0);
  auto model = std::make_shared<BertBlock>();
  auto compiled = compile(model);
  train_bert_against_eager([&](const Tensor &x, const Tensor &mask) { return compiled->forward({x, mask}); },
                           *model);
  EXPECT_EQ(compiled->stats().compiles, 1);
  EXPECT_EQ(compiled->stats().cache_hits, 19);
  EXPECT_TRUE(compiled->graph_breaks().empty());
}

TEST(CompileCallable, TwoInputTwoOutputFunctionReturningTupleMatchesEagerFor20Steps) {
  manual_seed(0);
  auto model = std::make_shared<BertBlock>();
  auto fn = compile([&](const Tensor &x, const Tensor &mask) {
    std::vector<Tensor> out = model->forward({x, mask});
    return std::make_tuple(out[0], out[1]);
  });
  train_bert_against_eager(
      [&](const Tensor &x, const Tensor &mask) {
        auto [logits, loss] = fn(x, mask);
        return std::vector<Tensor>{logits, loss};
      },
      *model);
  EXPECT_EQ(fn.stats().compiles, 1);
  EXPECT_EQ(fn.stats().cache_hits, 19);
}

struct Mlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Mlp() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 4));
  }
  Tensor forward(const Tensor &x) override { return fc2->forward(tanh(fc1->forward(x))); }
  std::string name() const override { return "Mlp"; }
  void replace_fc2(std::shared_ptr<nn::Linear> m) {
    fc2 = m;
    replace_module("fc2", m);
  }
};

Tensor labels_for(int step) {
  std::vector<int64_t> y;
  for (int i = 0; i < 8; ++i) y.push_back((i * 3 + step) % 4);
  return tensor(y, {8});
}

TEST(CompileCallable, WholeTrainingStepFunctionMatchesEagerFor20Steps) {
  manual_seed(1);
  auto eager = std::make_shared<Mlp>();
  manual_seed(1);
  auto model = std::make_shared<Mlp>();
  optim::SGD eager_opt(eager->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  auto step_fn = compile([&](const Tensor &x, const Tensor &y) { return F::cross_entropy(model->forward(x), y); });
  for (int step = 0; step < 20; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    manual_seed(50 + step);
    Tensor x = randn({8, 6});
    Tensor y = labels_for(step);
    Tensor want = F::cross_entropy(eager->forward(x), y);
    eager_opt.zero_grad();
    want.backward();
    eager_opt.step();
    Tensor loss = step_fn(x, y);  // backward and the optimizer step stay outside, as with torch.compile
    opt.zero_grad();
    loss.backward();
    expect_same_grads(*eager, *model, "step " + std::to_string(step));
    opt.step();
    expect_close(loss, want, kRtol, kAtol, "loss");
  }
  auto pe = eager->named_parameters(), pc = model->named_parameters();
  for (size_t i = 0; i < pe.size(); ++i) expect_close(pc[i].second, pe[i].second, kRtol, kAtol, pe[i].first);
  EXPECT_EQ(step_fn.stats().compiles, 1);
  EXPECT_EQ(step_fn.stats().cache_hits, 19);
}

/// Runs `call` with KILN_LOG=recompiles and returns what it printed.
template <class Call> std::string recompile_log(Call call) {
  setenv("KILN_LOG", "recompiles", 1);
  testing::internal::CaptureStderr();
  call();
  std::string log = testing::internal::GetCapturedStderr();
  unsetenv("KILN_LOG");
  return log;
}

TEST(CompileCallable, NonTensorArgumentsAreGuardedByValue) {
  auto body = [](const Tensor &x, int64_t k, double scale, bool negate, const std::string &mode) {
    Tensor y = x * scale + static_cast<double>(k);
    if (negate) y = -y;
    return mode == "exp" ? exp(y) : tanh(y);
  };
  auto fn = compile(body);
  manual_seed(2);
  Tensor x = randn({3, 4});
  auto check = [&](int64_t k, double scale, bool negate, const std::string &mode, int compiles, int hits) {
    SCOPED_TRACE(std::to_string(k) + " " + std::to_string(scale) + " " + std::to_string(negate) + " " + mode);
    expect_close(fn(x, k, scale, negate, mode), body(x, k, scale, negate, mode), kRtol, kAtol, "value");
    EXPECT_EQ(fn.stats().compiles, compiles);
    EXPECT_EQ(fn.stats().cache_hits, hits);
  };
  check(3, 0.5, false, "tanh", 1, 0);
  check(3, 0.5, false, "tanh", 1, 1);  // same values: a cache hit
  std::string log = recompile_log([&] { check(4, 0.5, false, "tanh", 2, 1); });
  EXPECT_NE(log.find("argument 1 (int) changed 3 -> 4"), std::string::npos) << log;
  log = recompile_log([&] { check(4, 0.25, false, "tanh", 3, 1); });
  EXPECT_NE(log.find("argument 2 (double) changed 0.5 -> 0.25"), std::string::npos) << log;
  log = recompile_log([&] { check(4, 0.25, true, "tanh", 4, 1); });
  EXPECT_NE(log.find("argument 3 (bool) changed false -> true"), std::string::npos) << log;
  log = recompile_log([&] { check(4, 0.25, true, "exp", 5, 1); });
  EXPECT_NE(log.find("argument 4 (string) changed \"tanh\" -> \"exp\""), std::string::npos) << log;
  check(3, 0.5, false, "tanh", 5, 2);  // the first artifact still serves its values
  check(4, 0.25, true, "exp", 5, 3);
}

TEST(CompileCallable, CapturedModuleChangesRecompile) {
  manual_seed(3);
  auto model = std::make_shared<Mlp>();
  auto fn = compile([&](const Tensor &x) { return model->forward(x); });
  Tensor x = randn({2, 6});
  expect_close(fn(x), model->forward(x), kRtol, kAtol, "first");
  fn(x);
  EXPECT_EQ(fn.stats().compiles, 1);
  EXPECT_EQ(fn.stats().cache_hits, 1);
  // A child replaced: its parameters are other tensors.
  model->replace_fc2(std::make_shared<nn::Linear>(16, 4));
  std::string log =
      recompile_log([&] { expect_close(fn(x), model->forward(x), kRtol, kAtol, "after replace_module"); });
  EXPECT_EQ(fn.stats().compiles, 2);
  EXPECT_NE(log.find("a parameter or buffer of module Mlp (used by the function) was replaced"), std::string::npos)
      << log;
  // A parameter frozen: requires_grad is guarded.
  model->fc1->weight.requires_grad_(false);
  fn(x);
  EXPECT_EQ(fn.stats().compiles, 3);
  model->fc1->weight.requires_grad_(true);
  // The captured model itself replaced (the old one destroyed).
  model = std::make_shared<Mlp>();
  log = recompile_log([&] { expect_close(fn(x), model->forward(x), kRtol, kAtol, "new model"); });
  EXPECT_NE(log.find("module Mlp used by the function was destroyed"), std::string::npos) << log;
  // Gradients of the new model's parameters land in .grad.
  Tensor out = fn(x).sum();
  out.backward();
  EXPECT_TRUE(model->fc1->weight.grad().defined());
  const int compiles = fn.stats().compiles;
  model->eval();  // training mode of a found module is guarded
  fn(x);
  EXPECT_EQ(fn.stats().compiles, compiles + 1);
}

TEST(CompileCallable, VectorAndTupleReturnsWithOneBackward) {
  manual_seed(4);
  Tensor w1 = randn({3}).requires_grad_(true), w2 = randn({3}).requires_grad_(true);
  auto body = [&](const Tensor &x) { return std::vector<Tensor>{exp(x * w1), sin(x) * w2, x.sum(Shape{1})}; };
  auto fn = compile(body);
  Tensor x = randn({2, 3});
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    Tensor xe = x.detach().requires_grad_(true), xc = x.detach().requires_grad_(true);
    std::vector<Tensor> want = body(xe);
    Tensor want_w1 = autograd::grad({want[0].sum()}, {ones_like(want[0].sum())}, {w1}, /*retain_graph=*/true)[0];
    std::vector<Tensor> got = fn(xc);
    ASSERT_EQ(got.size(), 3u);
    for (size_t k = 0; k < 3; ++k) expect_close(got[k], want[k], kRtol, kAtol, "output " + std::to_string(k));
    // Only output 0 is used: w2 (reached only through output 1) gets no
    // gradient, as in eager; w1 and x get theirs from the one backward.
    w1.set_grad(Tensor());
    w2.set_grad(Tensor());
    (got[0].sum() + got[2].sum()).backward();
    expect_close(w1.grad(), want_w1, kRtol, kAtol, "w1.grad");
    EXPECT_FALSE(w2.grad().defined());
    (want[0].sum() + want[2].sum()).backward();
    expect_close(xc.grad(), xe.grad(), kRtol, kAtol, "x.grad");
  }
  auto pair_fn = compile([](const Tensor &a, const Tensor &b) { return std::make_pair(a * b, a - b); });
  auto [prod, diff] = pair_fn(x, x * 2.0);
  expect_close(prod, x * x * 2.0, kRtol, kAtol, "pair first");
  expect_close(diff, -x, kRtol, kAtol, "pair second");
  auto tuple_fn = compile([](const Tensor &a) { return std::make_tuple(a + 1.0, a * 3.0, relu(a)); });
  auto [p, q, r] = tuple_fn(x);
  expect_close(r, relu(x), kRtol, kAtol, "tuple third");
  expect_close(q, x * 3.0, kRtol, kAtol, "tuple second");
}

TEST(CompileCallable, GraphBreakWithTwoInputsAndTwoOutputs) {
  manual_seed(5);
  auto eager = std::make_shared<Mlp>();
  manual_seed(5);
  auto model = std::make_shared<Mlp>();
  auto body = [](Mlp &m, const Tensor &x, const Tensor &y) {
    Tensor h = m.forward(x);
    if (h.mean().item() > 0.0) h = h * 2.0;  // a data-dependent branch: a graph break
    else h = h - 1.0;
    return std::make_tuple(h, F::cross_entropy(h, y));
  };
  auto fn = compile([&](const Tensor &x, const Tensor &y) { return body(*model, x, y); });
  for (int call = 0; call < 4; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    manual_seed(60 + call);
    Tensor x = randn({8, 6}) + (call % 2 ? 1.0 : -1.0);
    Tensor y = labels_for(call);
    auto [he, le] = body(*eager, x, y);
    auto [hc, lc] = fn(x, y);
    expect_close(hc, he, kRtol, kAtol, "h");
    expect_close(lc, le, kRtol, kAtol, "loss");
    eager->zero_grad();
    model->zero_grad();
    (le + he.mean()).backward();
    (lc + hc.mean()).backward();
    expect_same_grads(*eager, *model, "call " + std::to_string(call));
  }
  ASSERT_FALSE(fn.graph_breaks().empty());
  EXPECT_EQ(fn.graph_breaks()[0], "item");
  EXPECT_GE(fn.stats().graph_break_segments, 2);
}

/// `call` throws kiln::Error whose message contains every one of `parts`.
template <class Call> void expect_error(Call call, std::vector<std::string> parts) {
  try {
    call();
    ADD_FAILURE() << "no kiln::Error";
  } catch (const Error &e) {
    const std::string m = e.what();
    for (const std::string &part : parts) EXPECT_NE(m.find(part), std::string::npos) << m;
  }
}

TEST(CompileCallable, BadCallsNameTheArgument) {
  manual_seed(6);
  auto model = std::make_shared<Mlp>();
  auto step = compile([&](const Tensor &x, const Tensor &y) { return F::cross_entropy(model->forward(x), y); });
  Tensor x = randn({8, 6});
  step(x, labels_for(0));
  expect_error([&] { step(x, Tensor()); }, {"undefined tensor", "argument 1"});
  // Float labels on a later call: the new trace fails in cross_entropy and
  // the message says which argument changed.
  expect_error([&] { step(x, labels_for(0).to(kFloat32)); }, {"argument 1 dtype int64 -> float32"});
  manual_seed(0);
  auto bert = compile(std::make_shared<BertBlock>());
  Tensor xb = randn({BertBlock::B, BertBlock::T, BertBlock::D});
  bert->forward({xb, padding_mask(5, 3)});
  expect_error([&] { bert->forward(std::vector<Tensor>{xb}); }, {"CompiledBertBlock.forward", "expected 2 input tensors", "got 1"});
  expect_error([&] { bert->forward({xb, Tensor()}); }, {"undefined tensor", "input 1"});
}

TEST(CompileCallable, BackwardInsideTheCompiledFunctionIsAnError) {
  manual_seed(7);
  auto model = std::make_shared<Mlp>();
  auto step = compile([&](const Tensor &x, const Tensor &y) {
    Tensor loss = F::cross_entropy(model->forward(x), y);
    loss.backward();
    return loss;
  });
  expect_error([&] { step(randn({8, 6}), labels_for(0)); }, {"backward", "outside the compiled call"});
  for (const Tensor &p : model->parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace kiln
