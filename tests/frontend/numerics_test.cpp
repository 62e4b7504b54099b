// NaN, signed zeros, subnormals and other numeric edge cases against
// PyTorch, eager and compiled (kiln::compile of a module doing the op must
// give the eager result bit for bit where PyTorch's value is exact).
//
// The expected values are literals taken from torch 2.15 (CPU):
// tests/golden/numerics/gen_numerics.py prints each of them.
#include <cmath>
#include <functional>
#include <limits>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// A module whose forward is `fn` (one input, one output).
struct Fn : nn::Module {
  std::function<Tensor(const Tensor &)> fn;
  explicit Fn(std::function<Tensor(const Tensor &)> f) : fn(std::move(f)) {}
  Tensor forward(const Tensor &x) override { return fn(x); }
  std::string name() const override { return "Fn"; }
};

/// Output and input gradient (of out.sum(), or of `weights` * out) of one call.
struct Result {
  std::vector<double> out, grad;
};

Result call(nn::Module &m, const Tensor &input, const Tensor &out_grad = Tensor()) {
  Tensor x = input.detach().clone();
  x.requires_grad_(true);
  Tensor y = m.forward(x);
  Tensor loss = out_grad.defined() ? (y * out_grad).sum() : y.sum();
  loss.backward();
  return {y.detach().to(kFloat64).to_vector<double>(), x.grad().to(kFloat64).to_vector<double>()};
}

/// Equal as PyTorch prints them: NaN matches NaN, and (with `signed_zeros`)
/// the sign of a zero counts.
void expect_same(const std::vector<double> &got, const std::vector<double> &want, const std::string &what,
                 bool signed_zeros = true) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "] = " << got[i] << ", want NaN";
      continue;
    }
    EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
    if (signed_zeros)
      EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << what << "[" << i << "] sign of " << got[i];
  }
}

/// Runs `fn` on `x` eagerly and compiled (the tracing call and a cached
/// call) and checks the output and the gradient of its sum against PyTorch
/// (the gradient's zero signs only with `signed_zero_grads`).
void expect_torch(const std::function<Tensor(const Tensor &)> &fn, const Tensor &x, const std::vector<double> &out,
                  const std::vector<double> &grad, bool signed_zero_grads = true) {
  auto eager = std::make_shared<Fn>(fn);
  Result e = call(*eager, x);
  expect_same(e.out, out, "eager output");
  expect_same(e.grad, grad, "eager gradient", signed_zero_grads);
  auto compiled = compile(std::make_shared<Fn>(fn));
  for (int i = 0; i < 2; ++i) {
    Result c = call(*compiled, x);
    expect_same(c.out, out, "compiled output, call " + std::to_string(i));
    expect_same(c.grad, grad, "compiled gradient, call " + std::to_string(i), signed_zero_grads);
  }
}

Tensor f32(const std::vector<float> &v) { return tensor(v, {static_cast<int64_t>(v.size())}); }

// ---- NaN and signed zeros ------------------------------------------------------

TEST(Numerics, ReluKeepsNaNAndNegativeZero) {
  // torch.relu([nan, -0., 0., 1., -1.]) = [nan, -0., 0., 1., 0.]; its
  // gradient (threshold_backward: zero where the result <= 0) is 1 at NaN.
  expect_torch([](const Tensor &x) { return relu(x); }, f32({kNaN, -0.0f, 0.0f, 1.0f, -1.0f}),
               {NAN, -0.0, 0.0, 1.0, 0.0}, {1.0, 0.0, 0.0, 1.0, 0.0});
}

TEST(Numerics, ReluAfterMathKeepsNaN) {
  // A fused kernel: relu(log(x)) with log(-1) = NaN; d/dx = 1 * (1 / x) there.
  expect_torch([](const Tensor &x) { return relu(log(x)); }, f32({-1.0f, 1.0f}), {NAN, 0.0}, {-1.0, 0.0});
}

TEST(Numerics, MaximumPropagatesNaNAndKeepsTheFirstZero) {
  // torch.maximum(a, b): NaN if either is NaN; on a tie the first operand
  // (maximum(-0., 0.) = -0., maximum(0., -0.) = 0.).
  Tensor b = f32({0.0f, kNaN, 0.0f, -0.0f, 2.0f});
  expect_torch([b](const Tensor &x) { return maximum(x, b); }, f32({kNaN, 0.0f, -0.0f, 0.0f, 1.0f}),
               {NAN, NAN, -0.0, 0.0, 2.0}, {1.0, 1.0, 0.5, 0.5, 0.0});
}

TEST(Numerics, MaximumGradientAtNaNGoesToBothOperands) {
  // torch: x = [nan, -1, 0, 0.5], y = 0: dx = [1, 0, 0.5, 1], dy = [1, 1, 0.5, 0].
  Tensor x = f32({kNaN, -1.0f, 0.0f, 0.5f}), y = zeros({4});
  x.requires_grad_(true);
  y.requires_grad_(true);
  maximum(x, y).sum().backward();
  expect_same(x.grad().to_vector<double>(), {1.0, 0.0, 0.5, 1.0}, "dx");
  expect_same(y.grad().to_vector<double>(), {1.0, 1.0, 0.5, 0.0}, "dy");
}

TEST(Numerics, ArgmaxReturnsTheFirstNaN) {
  // torch.argmax([[1, nan, 3, nan], [1, 2, 3, 3]], 1) = [1, 2], like
  // torch.max(x, 1).indices (and Kiln's max(x, 1).second).
  Tensor x = tensor({1.0f, kNaN, 3.0f, kNaN, 1.0f, 2.0f, 3.0f, 3.0f}, {2, 4});
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(max(x, 1).second.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(argmax(f32({kNaN, 5.0f}), 0).item(), 0.0);
  auto compiled = compile(std::make_shared<Fn>([](const Tensor &t) { return argmax(t * 2.0, 1).to(kFloat32); }));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(compiled->forward(x).to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));
}

TEST(Numerics, MaxAlongDimKeepsNaN) {
  // torch.max([[1, nan, 3]], 1) = (nan, 1); the gradient goes to the NaN.
  Tensor x = tensor({1.0f, kNaN, 3.0f}, {1, 3});
  x.requires_grad_(true);
  auto [values, indices] = max(x, 1);
  EXPECT_TRUE(std::isnan(values.item()));
  EXPECT_EQ(indices.item(), 1.0);
  values.sum().backward();
  expect_same(x.grad().to_vector<double>(), {0.0, 1.0, 0.0}, "dx");
}

TEST(Numerics, ClampPassesNaNWithZeroGradient) {
  // torch.clamp(x, -1, 1): NaN stays NaN with gradient 0 (clamp_backward's
  // comparisons are false for NaN); inside the range the gradient is 1. The
  // bounds themselves are left out: PyTorch versions differ there.
  expect_torch([](const Tensor &x) { return clamp(x, -1.0, 1.0); }, f32({kNaN, -2.0f, -0.5f, 0.5f, 2.0f, -0.0f}),
               {NAN, -1.0, -0.5, 0.5, 1.0, -0.0}, {0.0, 0.0, 1.0, 1.0, 0.0, 1.0});
  // One bound: torch.clamp(x, min=0) of [nan, -1, 0.5].
  expect_torch([](const Tensor &x) { return clamp(x, 0.0, INFINITY); }, f32({kNaN, -1.0f, 0.5f}), {NAN, 0.0, 0.5},
               {0.0, 0.0, 1.0});
  // torch.clamp(-0., min=0) = -0. (it is not < 0).
  EXPECT_TRUE(std::signbit(clamp(f32({-0.0f}), 0.0, 1.0).item()));
}

TEST(Numerics, AmaxPropagatesNaN) {
  // torch.amax([1, nan, 3]) = nan, and its gradient is nan everywhere
  // (grad / count of elements equal to the NaN result, which is 0).
  expect_torch([](const Tensor &x) { return amax(x, {0}, true); }, f32({1.0f, kNaN, 3.0f}), {NAN}, {NAN, NAN, NAN});
}

TEST(Numerics, AmaxOfNegativeZeros) {
  // torch.amax([-0., -0.]) = -0.; eager Kiln and torch keep the first of
  // equal values, so amax([-0., 0.]) = -0. and amax([0., -0.]) = 0.
  EXPECT_TRUE(std::signbit(amax(f32({-0.0f, -0.0f})).item()));
  EXPECT_TRUE(std::signbit(amax(f32({-0.0f, 0.0f})).item()));
  EXPECT_FALSE(std::signbit(amax(f32({0.0f, -0.0f})).item()));
  auto compiled = compile(std::make_shared<Fn>([](const Tensor &x) { return amax(relu(x), {0}, true); }));
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(std::signbit(compiled->forward(f32({-0.0f, -0.0f})).item()));
}

TEST(Numerics, ReductionsPropagateNaN) {
  // torch: sum/mean/logsumexp of [1, nan] are nan; logsumexp([1, inf]) = inf,
  // logsumexp([-inf, -inf]) = -inf.
  Tensor x = f32({1.0f, kNaN});
  for (auto *fn : {+[](const Tensor &t) { return sum(t, {0}, true); }, +[](const Tensor &t) { return mean(t, {0}, true); },
                   +[](const Tensor &t) { return logsumexp(t, {0}, true); }}) {
    EXPECT_TRUE(std::isnan(fn(x).item()));
    auto compiled = compile(std::make_shared<Fn>(fn));
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(std::isnan(compiled->forward(x).item()));
  }
  EXPECT_EQ(logsumexp(f32({1.0f, INFINITY}), {0}).item(), INFINITY);
  EXPECT_EQ(logsumexp(f32({-INFINITY, -INFINITY}), {0}).item(), -INFINITY);
}

TEST(Numerics, WhereKeepsNaNAndNegativeZero) {
  // torch.where([True, False], [nan, nan], [-0., -0.]) = [nan, -0.].
  Tensor c = ne(f32({1.0f, 0.0f}), zeros({}));
  Tensor other = f32({-0.0f, -0.0f});
  expect_torch([c, other](const Tensor &x) { return where(c, x, other); }, f32({kNaN, kNaN}), {NAN, -0.0},
               {1.0, 0.0});
}

// ---- subnormals -----------------------------------------------------------------

TEST(Numerics, CompiledKernelsKeepSubnormals) {
  // torch.exp(-88.) = 6.0546e-39 and exp(-100.) = 3.7835e-44 (subnormal),
  // torch.log(1e-40) = -92.1034, bfloat16(1e-40) = 9.1835e-41: the IEEE
  // results, which eager Kiln gives too.
  auto exp_log = compile(std::make_shared<Fn>([](const Tensor &x) { return exp(x) + log(x * -1.0); }));
  auto bf16 = compile(std::make_shared<Fn>([](const Tensor &x) { return (x * 1.0).to(kBFloat16).to(kFloat32); }));
  Tensor x = f32({-88.0f, -100.0f, -1e-40f, -1.0f});
  for (int i = 0; i < 2; ++i) {
    std::vector<float> got = exp_log->forward(x).to_vector<float>();
    std::vector<float> eager = (exp(x) + log(x * -1.0)).to_vector<float>();
    // exp(-88) + log(88), exp(-100) + log(100) are normal; the subnormal
    // terms are checked on their own below.
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], eager[k], 1e-5 * std::abs(eager[k])) << k;
  }
  auto exp_only = compile(std::make_shared<Fn>([](const Tensor &x) { return exp(x * 1.0); }));
  auto log_only = compile(std::make_shared<Fn>([](const Tensor &x) { return log(x * 1.0); }));
  for (int i = 0; i < 2; ++i) {
    std::vector<float> e = exp_only->forward(f32({-88.0f, -100.0f, -87.0f, -103.0f, -110.0f})).to_vector<float>();
    EXPECT_NEAR(e[0], 6.054601485195952e-39, 1e-6 * 6.0546e-39);
    EXPECT_EQ(e[1], 3.783505853677006e-44f);
    EXPECT_NEAR(e[2], std::exp(-87.0), 1e-6 * std::exp(-87.0));
    EXPECT_NEAR(e[3], std::exp(-103.0), 1.5e-45);  // within one subnormal step
    EXPECT_EQ(e[4], 0.0f);
    std::vector<float> l = log_only->forward(f32({1e-40f, 1e-45f, 1.1754944e-38f, 0.0f})).to_vector<float>();
    EXPECT_NEAR(l[0], -92.10340881347656, 5e-5);
    EXPECT_NEAR(l[1], std::log(static_cast<double>(1e-45f)), 5e-5);
    EXPECT_NEAR(l[2], std::log(1.1754944e-38), 1e-5);
    EXPECT_EQ(l[3], -INFINITY);
    EXPECT_EQ(bf16->forward(f32({1e-40f, -1e-40f})).to_vector<float>(),
              (std::vector<float>{9.183549615799121e-41f, -9.183549615799121e-41f}));
  }
  EXPECT_EQ(f32({1e-40f}).to(kBFloat16).to(kFloat32).item(), static_cast<double>(9.183549615799121e-41f));
}

// ---- gradients at singular points -----------------------------------------------

TEST(Numerics, PowZeroHasZeroGradient) {
  // torch.pow(x, 0.) = 1 (also for NaN) and its gradient is 0 everywhere,
  // also at x = 0 (not 0 * 0^-1 = NaN).
  expect_torch([](const Tensor &x) { return pow(x, 0.0); }, f32({0.0f, 2.0f, -1.0f, kNaN}), {1.0, 1.0, 1.0, 1.0},
               {0.0, 0.0, 0.0, 0.0});
  // Neighbouring exponents at 0, from torch: d/dx x^1 = 1, x^2 -> 0.
  expect_torch([](const Tensor &x) { return pow(x, 1.0); }, f32({0.0f, 2.0f}), {0.0, 2.0}, {1.0, 1.0});
  expect_torch([](const Tensor &x) { return pow(x, 2.0); }, f32({0.0f, 2.0f}), {0.0, 4.0}, {0.0, 4.0});
}

TEST(Numerics, CrossEntropyWithEveryTargetIgnored) {
  // torch: mean reduction gives a NaN loss and a zero gradient; sum gives 0.
  Tensor logits = tensor({0.5f, -1.0f, 2.0f, 0.1f, 0.3f, -0.2f}, {2, 3});
  Tensor ignored = tensor(std::vector<int64_t>{-100, -100}, {2});
  const std::vector<double> zero(6, 0.0);
  using nn::functional::cross_entropy;
  using nn::functional::Reduction;
  for (double smoothing : {0.0, 0.1}) {
    auto mean_loss = [&](const Tensor &x) { return cross_entropy(x, ignored, Reduction::Mean, -100, smoothing); };
    expect_torch(mean_loss, logits, {NAN}, zero, /*signed_zero_grads=*/false);
    auto sum_loss = [&](const Tensor &x) { return cross_entropy(x, ignored, Reduction::Sum, -100, smoothing); };
    expect_torch(sum_loss, logits, {0.0}, zero, /*signed_zero_grads=*/false);
  }
  // One target kept: the mean is over that one sample, as before.
  Tensor one = tensor(std::vector<int64_t>{2, -100}, {2});
  Tensor x = logits.detach().clone();
  x.requires_grad_(true);
  Tensor loss = cross_entropy(x, one);
  EXPECT_NEAR(loss.item(), -(2.0 - std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0))), 1e-6);
}

// ---- GEMMs with expanded operands ---------------------------------------------------

/// bmm(a, w expanded over the batch) by hand: a[b] x w for each b.
std::vector<double> bmm_by_hand(const std::vector<float> &a, const std::vector<float> &w, int64_t B, int64_t M,
                                int64_t K, int64_t N) {
  std::vector<double> out(B * M * N, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) out[(b * M + i) * N + j] += double(a[(b * M + i) * K + k]) * w[k * N + j];
  return out;
}

struct SharedWeightBmm : nn::Module {
  Tensor w;
  SharedWeightBmm() {
    manual_seed(3);
    w = register_parameter("w", randn({5, 4}));
  }
  Tensor forward(const Tensor &a) override { return bmm(a, w.unsqueeze(0).expand({3, 5, 4})); }
  std::string name() const override { return "SharedWeightBmm"; }
};

TEST(Numerics, BmmWithAnExpandedOperandRuns) {
  manual_seed(1);
  Tensor a = randn({3, 4, 5});
  auto eager = std::make_shared<SharedWeightBmm>();
  auto compiled = compile(std::make_shared<SharedWeightBmm>());
  const std::vector<double> want = bmm_by_hand(a.to_vector<float>(), eager->w.to_vector<float>(), 3, 4, 5, 4);
  // d(sum)/dw[k, j] = sum over b, i of a[b, i, k].
  std::vector<double> want_dw(20, 0.0);
  std::vector<float> av = a.to_vector<float>();
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t k = 0; k < 5; ++k)
        for (int64_t j = 0; j < 4; ++j) want_dw[k * 4 + j] += av[(b * 4 + i) * 5 + k];
  for (nn::Module *m : {static_cast<nn::Module *>(eager.get()), static_cast<nn::Module *>(compiled.get())})
    for (int call_no = 0; call_no < 2; ++call_no) {
      m->zero_grad();
      Result r = call(*m, a);
      ASSERT_EQ(r.out.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(r.out[k], want[k], 1e-5) << m->name() << " out " << k;
      std::vector<double> dw = m->parameters()[0].grad().to_vector<double>();
      for (size_t k = 0; k < want_dw.size(); ++k) EXPECT_NEAR(dw[k], want_dw[k], 1e-4) << m->name() << " dw " << k;
    }
}

TEST(Numerics, BatchedGemmWithBothOperandsBroadcast) {
  // Both batch strides 0 (and one operand transposed): oneDNN 2.6 has no
  // matmul for a broadcast src and weights with a full batch dst, so the
  // compiled GEMM threw "oneDNN has no matmul for 3 x [4, 5] x [5, 4]";
  // forward and backward, eager and compiled, against a loop by hand.
  manual_seed(2);
  Tensor w = randn({4, 5});
  auto fn = [w](const Tensor &x) { return bmm(x.unsqueeze(0).expand({3, 4, 5}), w.t().unsqueeze(0).expand({3, 5, 4})); };
  Tensor x = randn({4, 5});
  std::vector<float> xs, wt = w.t().contiguous().to_vector<float>();
  for (int b = 0; b < 3; ++b)
    for (float v : x.to_vector<float>()) xs.push_back(v);
  const std::vector<double> want = bmm_by_hand(xs, wt, 3, 4, 5, 4);
  // d(sum)/dx[i, k] = 3 * sum_j w^T[k, j].
  std::vector<double> want_dx(20, 0.0);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t k = 0; k < 5; ++k)
      for (int64_t j = 0; j < 4; ++j) want_dx[i * 5 + k] += 3.0 * wt[k * 4 + j];
  auto eager = std::make_shared<Fn>(fn);
  auto compiled = compile(std::make_shared<Fn>(fn));
  for (nn::Module *m : {static_cast<nn::Module *>(eager.get()), static_cast<nn::Module *>(compiled.get()),
                        static_cast<nn::Module *>(compiled.get())}) {
    Result r = call(*m, x);
    ASSERT_EQ(r.out.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(r.out[k], want[k], 1e-5) << k;
    for (size_t k = 0; k < want_dx.size(); ++k) EXPECT_NEAR(r.grad[k], want_dx[k], 1e-4) << k;
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// ---- float64 compiled -----------------------------------------------------------

std::shared_ptr<nn::Sequential> f64_mlp() {
  manual_seed(7);
  auto mlp = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 4)});
  mlp->to(kFloat64);
  return mlp;
}

TEST(Numerics, Float64MlpCompilesAndRunsInFloat64) {
  manual_seed(8);
  Tensor x = randn({8, 16}, kFloat64);
  auto eager = f64_mlp();
  auto compiled = compile(f64_mlp());
  for (int call_no = 0; call_no < 2; ++call_no) {
    eager->zero_grad();
    compiled->zero_grad();
    Tensor e = eager->forward(x), c = compiled->forward(x);
    ASSERT_EQ(c.dtype(), kFloat64);
    (e * e).sum().backward();
    (c * c).sum().backward();
    std::vector<double> ev = e.to_vector<double>(), cv = c.to_vector<double>();
    for (size_t k = 0; k < ev.size(); ++k) EXPECT_NEAR(cv[k], ev[k], 1e-12 * (1 + std::abs(ev[k]))) << k;
    auto pe = eager->parameters(), pc = compiled->parameters();
    ASSERT_EQ(pe.size(), pc.size());
    for (size_t i = 0; i < pe.size(); ++i) {
      ASSERT_EQ(pc[i].grad().dtype(), kFloat64);
      std::vector<double> ge = pe[i].grad().to_vector<double>(), gc = pc[i].grad().to_vector<double>();
      for (size_t k = 0; k < ge.size(); ++k) EXPECT_NEAR(gc[k], ge[k], 1e-12 * (1 + std::abs(ge[k]))) << i << " " << k;
    }
  }
}

/// Float64 through every kind of compiled op: elementwise math, reductions
/// (sum, mean, amax via logsumexp and softmax), matmul and bmm.
struct Float64Mix : nn::Module {
  Tensor w, v;
  Float64Mix() {
    manual_seed(9);
    w = register_parameter("w", randn({6, 5}, kFloat64));
    v = register_parameter("v", randn({5}, kFloat64));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = tanh(x.matmul(w)) + sigmoid(x.matmul(w) * v) * sqrt(exp(x.sum({1}, true) * 0.1) + 1.0);
    Tensor p = nn::functional::softmax(h, 1);
    Tensor att = bmm(h.unsqueeze(0), p.t().unsqueeze(0)).squeeze(0);  // [4, 4]
    return logsumexp(att, {1}) + log(mean(p * p, {1}) + 1.0) + amax(h, {1}) - relu(h).sum({1}) * 0.01;
  }
  std::string name() const override { return "Float64Mix"; }
};

TEST(Numerics, Float64MixedOpsCompileAndRunInFloat64) {
  manual_seed(10);
  Tensor x = randn({4, 6}, kFloat64);
  auto eager = std::make_shared<Float64Mix>();
  auto compiled = compile(std::make_shared<Float64Mix>());
  for (int call_no = 0; call_no < 2; ++call_no) {
    eager->zero_grad();
    compiled->zero_grad();
    Result e = call(*eager, x), c = call(*compiled, x);
    for (size_t k = 0; k < e.out.size(); ++k) EXPECT_NEAR(c.out[k], e.out[k], 1e-12 * (1 + std::abs(e.out[k]))) << k;
    for (size_t k = 0; k < e.grad.size(); ++k) EXPECT_NEAR(c.grad[k], e.grad[k], 1e-12 * (1 + std::abs(e.grad[k])));
    auto pe = eager->parameters(), pc = compiled->parameters();
    for (size_t i = 0; i < pe.size(); ++i) {
      ASSERT_EQ(pc[i].grad().dtype(), kFloat64);
      std::vector<double> ge = pe[i].grad().to_vector<double>(), gc = pc[i].grad().to_vector<double>();
      for (size_t k = 0; k < ge.size(); ++k) EXPECT_NEAR(gc[k], ge[k], 1e-12 * (1 + std::abs(ge[k]))) << i << " " << k;
    }
  }
  EXPECT_GE(compiled->stats().compiles, 1);
  EXPECT_TRUE(compiled->graph_breaks().empty());
}

// ---- issue 13: extremes, rounding and division modes, eager and compiled ---------
// Expected values printed by torch 2.x for the same inputs.

TEST(Numerics, MinimumPropagatesNaNAndKeepsTheFirstZero) {
  Tensor b = f32({0.0f, kNaN, 0.0f, -0.0f, 2.0f});
  expect_torch([b](const Tensor &x) { return minimum(x, b); }, f32({kNaN, 0.0f, -0.0f, 0.0f, 1.0f}),
               {NAN, NAN, -0.0, 0.0, 1.0}, {1.0, 1.0, 0.5, 0.5, 1.0});
}

TEST(Numerics, RoundIsHalfToEvenAndKeepsSignedZeros) {
  expect_torch([](const Tensor &x) { return round(x); }, f32({2.5f, -2.5f, -0.5f, 0.5f, kNaN, -0.0f}),
               {2.0, -2.0, -0.0, 0.0, NAN, -0.0}, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
}

TEST(Numerics, FloorDivideAndRemainderFollowPython) {
  // floor_divide(-0., 2) = -0., 1 // -2 = -1, +-1 // 0 = +-inf; remainder(1, 0) = nan, remainder(-6, 3) = -0.
  Tensor d = f32({2.0f, -2.0f, 0.0f, 0.0f, 3.0f, 2.0f});
  expect_torch([d](const Tensor &x) { return floor_divide(x, d); }, f32({-0.0f, 1.0f, 1.0f, -1.0f, -6.0f, kNaN}),
               {-0.0, -1.0, INFINITY, -INFINITY, -2.0, NAN}, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
  Tensor m = f32({2.0f, -2.0f, 0.0f, 3.0f, 3.0f, 2.0f});
  expect_torch([m](const Tensor &x) { return remainder(x, m); }, f32({-0.0f, 1.0f, 1.0f, -6.0f, 6.0f, kNaN}),
               {-0.0, -1.0, NAN, -0.0, 0.0, NAN}, {1.0, 1.0, 1.0, 1.0, 1.0, 1.0});
}

TEST(Numerics, MinOverAllDimsSplitsTheGradientAmongNaNs) {
  expect_torch([](const Tensor &x) { return min(x); }, f32({3.0f, kNaN, 1.0f, kNaN}), {NAN}, {0.0, 0.5, 0.0, 0.5});
}

TEST(Numerics, ArgminAndMinAlongDimReturnTheFirstNaN) {
  Tensor x = tensor({1.0f, kNaN, 3.0f, kNaN, 3.0f, 1.0f, 1.0f, 2.0f}, {2, 4});
  auto compiled = compile(std::make_shared<Fn>([](const Tensor &t) {
    return argmin(t, 1).to(kFloat32) * 10.0 + min(t, 1).second.to(kFloat32);
  }));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(compiled->forward(x).to_vector<float>(), (std::vector<float>{11.0f, 11.0f}));
  EXPECT_TRUE(compiled->graph_breaks().empty());
}

}  // namespace
}  // namespace kiln
