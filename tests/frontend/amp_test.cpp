// Mixed precision: autocast state and per-op casting (kiln/amp.h, the table
// in ir/AutocastPolicy.h), the bfloat16 GEMM (runtime::gemm16) and eager
// matmul/bmm on it, GradScaler, and the bad-input catalogue for all three.
// PyTorch comparisons are in golden_amp_test.cpp.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "kiln/amp.h"
#include "kiln/kiln.h"
#include "kiln/runtime/Gemm.h"
#include "bad_cases.h"

namespace kiln {
namespace {

namespace F = nn::functional;

// ---- helpers ---------------------------------------------------------------------

/// float -> bfloat16 bits, round to nearest even (the conversion Kiln uses).
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float bf16_value(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Number of nodes named `name` in the autograd graph below t.
int count_nodes(const Tensor &t, const std::string &name) {
  std::set<autograd::Node *> seen;
  std::vector<autograd::Node *> stack;
  if (t.grad_fn()) stack.push_back(t.grad_fn().get());
  int n = 0;
  while (!stack.empty()) {
    autograd::Node *node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (node->name() == name) ++n;
    for (const autograd::Edge &e : node->next_edges)
      if (e.valid()) stack.push_back(e.fn.get());
  }
  return n;
}

void expect_same_values(const Tensor &a, const Tensor &b, const std::string &what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>()) << what;
}

// ---- autocast state -----------------------------------------------------------------

TEST(Autocast, GuardSetsAndNestingRestoresThreadLocalState) {
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(), kBFloat16);  // PyTorch's CPU default
  {
    AutocastGuard outer(kFloat16);
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(), kFloat16);
    {
      autocast off(kBFloat16, /*enabled=*/false);
      EXPECT_FALSE(autocast_enabled());
      EXPECT_EQ(autocast_dtype(), kBFloat16);
      {
        AutocastGuard inner(kBFloat16);
        EXPECT_TRUE(autocast_enabled());
      }
      EXPECT_FALSE(autocast_enabled());
    }
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(), kFloat16);
    bool other_thread_enabled = true;
    std::thread([&] { other_thread_enabled = autocast_enabled(); }).join();
    EXPECT_FALSE(other_thread_enabled);  // thread-local, as torch's autocast state
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(), kBFloat16);
}

TEST(Autocast, FailedGuardLeavesStateUnchanged) {
  AutocastGuard bf16(kBFloat16);
  EXPECT_THROW(AutocastGuard bad(kInt64), Error);
  EXPECT_TRUE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(), kBFloat16);
}

// ---- per-op policy ----------------------------------------------------------------------

TEST(Autocast, LowerPrecisionOpsRunInTheAutocastDtype) {
  manual_seed(1);
  Tensor x = randn({4, 8}), w = randn({6, 8}), b = randn({6});
  Tensor img = randn({1, 2, 5, 5}), kernel = randn({3, 2, 3, 3});
  Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 4});
  for (DType d : {kBFloat16, kFloat16}) {
    AutocastGuard autocast(d);
    EXPECT_EQ(F::linear(x, w, b).dtype(), d);
    EXPECT_EQ(matmul(x, w.t()).dtype(), d);
    EXPECT_EQ(bmm(x.unsqueeze(0), w.t().unsqueeze(0)).dtype(), d);
    EXPECT_EQ(F::conv2d(img, kernel).dtype(), d);
    EXPECT_EQ(F::scaled_dot_product_attention(q, k, v).dtype(), d);
    EXPECT_EQ(nn::Linear(8, 6).forward(x).dtype(), d);
  }
  // Outside a region, and inside a disabled one, nothing is cast.
  EXPECT_EQ(F::linear(x, w, b).dtype(), kFloat32);
  AutocastGuard off(kBFloat16, false);
  EXPECT_EQ(F::linear(x, w, b).dtype(), kFloat32);
}

TEST(Autocast, Float32OpsCast16BitInputsUp) {
  manual_seed(2);
  Tensor x = (abs(randn({4, 6})) + 0.5).to(kBFloat16);
  Tensor target = tensor(std::vector<int64_t>{0, 5, 2, 1}, {4});
  AutocastGuard autocast(kBFloat16);
  const std::vector<std::pair<const char *, std::function<Tensor()>>> ops = {
      {"softmax", [&] { return F::softmax(x, 1); }},
      {"log_softmax", [&] { return F::log_softmax(x, 1); }},
      {"layer_norm", [&] { return F::layer_norm(x, {6}); }},
      {"batch_norm", [&] { return F::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true); }},
      {"sum", [&] { return x.sum(); }},
      {"mean", [&] { return x.mean({1}); }},
      {"exp", [&] { return x.exp(); }},
      {"log", [&] { return x.log(); }},
      {"pow", [&] { return x.pow(2.0); }},
      {"rsqrt", [&] { return rsqrt(x); }},
      {"sqrt", [&] { return x.sqrt(); }},
      {"var", [&] { return var(x, {1}); }},
      {"std", [&] { return kiln::std(x, {1}); }},
      {"cumsum", [&] { return cumsum(x, 1); }},
      {"logsumexp", [&] { return logsumexp(x, {1}); }},
      {"cross_entropy", [&] { return F::cross_entropy(x, target); }},
      {"nll_loss", [&] { return F::nll_loss(x, target); }},
      {"mse_loss", [&] { return F::mse_loss(x, x); }},
      {"binary_cross_entropy_with_logits", [&] { return F::binary_cross_entropy_with_logits(x, x); }},
  };
  for (auto &[name, op] : ops) {
    Tensor y = op();
    EXPECT_EQ(y.dtype(), kFloat32) << name;
  }
  // The value is the float32 op on the (exactly widened) input.
  Tensor inside = F::softmax(x, 1);
  Tensor ref;
  {
    AutocastGuard off(kBFloat16, false);
    ref = F::softmax(x.to(kFloat32), 1);
  }
  expect_same_values(inside, ref, "softmax under autocast");
}

TEST(Autocast, IneligibleAndUnlistedOpsKeepTheirDtype) {
  Tensor xb = full({2, 4}, 0.5, kBFloat16);
  AutocastGuard autocast(kBFloat16);
  // Integers, bool and float64 are never cast (PyTorch's is_eligible).
  EXPECT_EQ(ones({3}, kInt64).sum().dtype(), kInt64);
  EXPECT_EQ(cumsum(ones({3}, kInt32), 0).dtype(), kInt64);
  EXPECT_EQ(matmul(ones({2, 2}, kFloat64), ones({2, 2}, kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(ones({2}, kFloat64).exp().dtype(), kFloat64);
  // Ops outside the table run in their input dtype, even composites whose
  // internals call listed ops (sigmoid -> exp, avg_pool2d -> conv2d).
  EXPECT_EQ(sigmoid(xb).dtype(), kBFloat16);
  EXPECT_EQ(silu(xb).dtype(), kBFloat16);
  EXPECT_EQ(gelu(xb, "tanh").dtype(), kBFloat16);
  EXPECT_EQ(gelu(xb).dtype(), kBFloat16);
  EXPECT_EQ(tanh(xb).dtype(), kBFloat16);
  EXPECT_EQ(relu(xb).dtype(), kBFloat16);
  EXPECT_EQ(F::avg_pool2d(full({1, 1, 4, 4}, 1.0), {2, 2}).dtype(), kFloat32);
  EXPECT_EQ(F::avg_pool2d(full({1, 1, 4, 4}, 1.0, kBFloat16), {2, 2}).dtype(), kBFloat16);
  // Promote ops: type promotion already picks the widest float.
  EXPECT_EQ((xb + ones({2, 4})).dtype(), kFloat32);
  EXPECT_EQ((xb * xb).dtype(), kBFloat16);
}

TEST(Autocast, ValuesEqualExplicitCastsAndGradientsReachFloat32Params) {
  manual_seed(3);
  Tensor x = randn({5, 8});
  Tensor w = (randn({3, 8}) * 0.5).requires_grad_(), b = randn({3}).requires_grad_();
  Tensor y;
  {
    AutocastGuard autocast(kBFloat16);
    y = F::linear(x, w, b);
  }
  ASSERT_EQ(y.dtype(), kBFloat16);
  // linear(x, w, b) under autocast == linear of the bfloat16-cast arguments.
  Tensor ref = F::linear(x.to(kBFloat16), w.detach().to(kBFloat16), b.detach().to(kBFloat16));
  expect_same_values(y, ref, "linear");
  y.to(kFloat32).sum().backward();
  // d sum(x w^T + b) / dw[j, k] = sum_i x[i, k] (here through the bfloat16
  // GEMM: sum_i bf16(x[i, k]) rounded to bfloat16), db = N; the cast's
  // backward returns them in float32.
  ASSERT_EQ(w.grad().dtype(), kFloat32);
  ASSERT_EQ(b.grad().dtype(), kFloat32);
  auto xv = x.to_vector<float>(), gw = w.grad().to_vector<float>();
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t k = 0; k < 8; ++k) {
      double s = 0.0;
      for (int64_t i = 0; i < 5; ++i) s += bf16_value(bf16_bits(xv[i * 8 + k]));
      EXPECT_NEAR(gw[j * 8 + k], s, 5 * std::ldexp(std::abs(s), -8) + 1e-6) << j << "," << k;
    }
  for (float g : b.grad().to_vector<float>()) EXPECT_EQ(g, 5.0f);
}

TEST(Autocast, InnerOpsOfAnAutocastOpAreNotCastAgain) {
  manual_seed(4);
  Tensor q = randn({2, 3, 4}).requires_grad_(), k = randn({2, 5, 4}).requires_grad_();
  Tensor v = randn({2, 5, 4}).requires_grad_();
  Tensor out;
  {
    AutocastGuard autocast(kBFloat16);
    out = F::scaled_dot_product_attention(q, k, v);
  }
  // The same graph and values as the op without autocast on the three
  // entry casts q, k, v -> bfloat16: the softmax inside (an fp32 op) ran in
  // bfloat16 without casting, and the bmm after it did not cast back (as in
  // PyTorch). A re-cast would add ToCopyBackward nodes and change values.
  Tensor ref = F::scaled_dot_product_attention(q.to(kBFloat16), k.to(kBFloat16), v.to(kBFloat16));
  EXPECT_EQ(out.dtype(), kBFloat16);
  EXPECT_EQ(count_nodes(out, "ToCopyBackward"), count_nodes(ref, "ToCopyBackward"));
  expect_same_values(out, ref, "sdpa");
  // cross_entropy: one cast of the logits, none inside log_softmax/nll_loss.
  Tensor logits = randn({4, 3}).to(kBFloat16).requires_grad_();
  Tensor target = tensor(std::vector<int64_t>{0, 1, 2, 0}, {4});
  Tensor loss;
  {
    AutocastGuard autocast(kBFloat16);
    loss = F::cross_entropy(logits, target);
  }
  Tensor loss_ref = F::cross_entropy(logits.to(kFloat32), target);
  EXPECT_EQ(loss.dtype(), kFloat32);
  EXPECT_EQ(count_nodes(loss, "ToCopyBackward"), count_nodes(loss_ref, "ToCopyBackward"));
  expect_same_values(loss, loss_ref, "cross_entropy");
}

TEST(Autocast, BackwardInsideTheRegionMatchesBackwardOutside) {
  manual_seed(5);
  Tensor x = randn({4, 6});
  Tensor w1 = randn({6, 6}).requires_grad_(), w2 = randn({6, 6}).requires_grad_();
  auto run = [&](bool backward_inside) {
    w1.set_grad(Tensor());
    w2.set_grad(Tensor());
    AutocastGuard autocast(kBFloat16);
    // Attention's backward runs broadcasting sums (sum_to, an fp32 op) on
    // bfloat16 gradients: they must stay bfloat16 as in the forward.
    Tensor h = F::linear(x, w2).unsqueeze(0);
    Tensor attn = F::scaled_dot_product_attention(h, h, h);
    Tensor loss = F::layer_norm(F::linear(x, w1), {6}).sum() + (attn * attn).to(kFloat32).sum();
    if (backward_inside) {
      loss.backward();
    } else {
      AutocastGuard off(kBFloat16, false);
      loss.backward();
    }
    return std::make_pair(w1.grad(), w2.grad());
  };
  auto [a1, a2] = run(false);
  auto [b1, b2] = run(true);
  EXPECT_EQ(b1.dtype(), kFloat32);
  expect_same_values(a1, b1, "w1.grad");
  expect_same_values(a2, b2, "w2.grad");
  // A gradient keeps its tensor's dtype: expand's backward sums (an fp32
  // op) a bfloat16 gradient, which must not be cast inside the region.
  Tensor leaf = full({1, 4}, 0.5, kBFloat16).requires_grad_();
  AutocastGuard autocast(kBFloat16);
  (leaf.expand({3, 4}) * leaf.expand({3, 4})).to(kFloat32).sum().backward();
  ASSERT_TRUE(leaf.grad().defined());
  EXPECT_EQ(leaf.grad().dtype(), kBFloat16);
  EXPECT_EQ(leaf.grad().to_vector<float>(), std::vector<float>(4, 3.0f));  // 3 rows of 2 * 0.5
}

TEST(Autocast, TrainingStepKeepsFloat32MasterWeights) {
  manual_seed(6);
  nn::Linear model(8, 4);
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.1));
  Tensor x = randn({16, 8});
  Tensor y = tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}, {16});
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(kBFloat16);
      loss = F::cross_entropy(model.forward(x), y);
    }
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, first);
  for (const Tensor &p : model.parameters()) EXPECT_EQ(p.dtype(), kFloat32);
}

// ---- bfloat16 GEMM -------------------------------------------------------------------------

/// Random bfloat16 bits for an [rows, cols] matrix, and their values.
std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed) {
  std::vector<uint16_t> out(static_cast<size_t>(n));
  uint32_t s = seed;
  for (auto &v : out) {
    s = s * 1664525u + 1013904223u;
    v = bf16_bits(static_cast<float>((s >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0));
  }
  return out;
}

/// Checks C = A x B (A [M, K] with strides (ars, acs), B likewise) against a
/// double reference on the same bfloat16 inputs. Bound: float32
/// accumulation error K * 2^-24 * sum |a||b| (Higham's gamma_K), plus one
/// rounding of the result to bfloat16 (2^-8 relative) for bf16 output.
void check_gemm16(int64_t M, int64_t K, int64_t N, bool a_transposed, bool b_transposed, DType out) {
  auto a = random_bf16(M * K, 1), b = random_bf16(K * N, 2);
  runtime::Matrix16View A{a.data(), M, K, a_transposed ? 1 : K, a_transposed ? M : 1};
  runtime::Matrix16View B{b.data(), K, N, b_transposed ? 1 : N, b_transposed ? K : 1};
  std::vector<float> cf(static_cast<size_t>(M * N), NAN);
  std::vector<uint16_t> ch(static_cast<size_t>(M * N), 0xffff);
  runtime::gemm16(kBFloat16, A, B, out, out == kFloat32 ? static_cast<void *>(cf.data()) : ch.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(bf16_value(A.data[i * A.row_stride + k * A.col_stride])) *
                         bf16_value(B.data[k * B.row_stride + j * B.col_stride]);
        ref += p;
        mag += std::abs(p);
      }
      double got = out == kFloat32 ? cf[i * N + j] : bf16_value(ch[i * N + j]);
      double bound = K * std::ldexp(mag, -24) + 1e-30;
      if (out == kBFloat16) bound += std::ldexp(std::abs(ref), -8);
      ASSERT_NEAR(got, ref, bound) << M << "x" << K << "x" << N << " at (" << i << ", " << j << ")";
    }
}

TEST(Gemm16, Bf16MatchesFloat32ReferenceOnTheSameRoundedInputs) {
  if (!runtime::gemm16_native(kBFloat16)) GTEST_SKIP() << "oneDNN has no bfloat16 matmul on this CPU";
  for (DType out : {kFloat32, kBFloat16}) {
    check_gemm16(7, 13, 5, false, false, out);
    check_gemm16(64, 96, 33, true, false, out);
    check_gemm16(33, 64, 48, false, true, out);
    check_gemm16(1, 40, 17, true, true, out);
    check_gemm16(2, 1, 3, false, false, out);
  }
}

TEST(Gemm16, EmptyInnerDimGivesZerosAndBadArgumentsThrow) {
  if (!runtime::gemm16_native(kBFloat16)) GTEST_SKIP() << "oneDNN has no bfloat16 matmul on this CPU";
  std::vector<float> c(6, NAN);
  uint16_t dummy = 0;
  runtime::gemm16(kBFloat16, {&dummy, 2, 0, 0, 1}, {&dummy, 0, 3, 3, 1}, kFloat32, c.data(), 3);
  for (float v : c) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(runtime::gemm16(kFloat32, {&dummy, 1, 1, 1, 1}, {&dummy, 1, 1, 1, 1}, kFloat32, c.data(), 1),
               std::runtime_error);
  EXPECT_THROW(runtime::gemm16(kBFloat16, {&dummy, 1, 1, 1, 1}, {&dummy, 1, 1, 1, 1}, kFloat16, c.data(), 1),
               std::runtime_error);
  EXPECT_THROW(runtime::gemm16(kBFloat16, {&dummy, 1, 2, 2, 1}, {&dummy, 1, 1, 1, 1}, kFloat32, c.data(), 1),
               std::runtime_error);
  EXPECT_FALSE(runtime::gemm16_native(kFloat32));
}

// bmm on bfloat16 runs one gemm16_batched call on the operands' strides: a
// broadcast operand (batch stride 0) and one whose batches interleave with
// its rows (a permuted view) must give float32 products of the same values,
// rounded once.
TEST(Gemm16, EagerBmmOnBroadcastAndPermutedBf16Operands) {
  manual_seed(11);
  Tensor a = randn({1, 5, 8}).to(kBFloat16).expand({3, 5, 8});              // batch stride 0
  Tensor b = randn({8, 3, 6}).to(kBFloat16).permute({1, 0, 2});             // [3, 8, 6], batch stride 6
  ASSERT_EQ(a.stride(0), 0);
  ASSERT_EQ(b.stride(0), 6);
  Tensor c = bmm(a, b);
  ASSERT_EQ(c.dtype(), kBFloat16);
  Tensor ref = bmm(a.to(kFloat32), b.to(kFloat32));
  auto cv = c.to_vector<double>(), rv = ref.to_vector<double>();
  ASSERT_EQ(cv.size(), 3u * 5 * 6);
  for (size_t i = 0; i < cv.size(); ++i) EXPECT_NEAR(cv[i], rv[i], std::ldexp(std::abs(rv[i]), -8) + 1e-5) << i;
}

TEST(Gemm16, EagerMatmulAndBmmOnBf16UseIt) {
  manual_seed(7);
  Tensor a = randn({2, 9, 12}).to(kBFloat16), b = randn({2, 12, 7}).to(kBFloat16);
  Tensor c = bmm(a, b);
  ASSERT_EQ(c.dtype(), kBFloat16);
  // Reference: float32 products of the same bfloat16 values, rounded once.
  Tensor ref = bmm(a.to(kFloat32), b.to(kFloat32));
  auto cv = c.to_vector<double>(), rv = ref.to_vector<double>();
  for (size_t i = 0; i < cv.size(); ++i) EXPECT_NEAR(cv[i], rv[i], std::ldexp(std::abs(rv[i]), -8) + 1e-5) << i;
  if (runtime::gemm16_native(kBFloat16)) {
    // Bitwise what gemm16 gives for matrix 1 read through a transposed view.
    Tensor bt = b.transpose(1, 2).contiguous().transpose(1, 2);  // column-major batches
    Tensor c1 = matmul(a.narrow(0, 1, 1).squeeze(0), bt.narrow(0, 1, 1).squeeze(0));
    std::vector<uint16_t> direct(9 * 7);
    Tensor ac = a.contiguous(), btc = bt;
    const uint16_t *pa = static_cast<const uint16_t *>(ac.raw_data()) + 9 * 12;
    const uint16_t *pb = static_cast<const uint16_t *>(btc.raw_data()) + 12 * 7;
    runtime::gemm16(kBFloat16, {pa, 9, 12, 12, 1}, {pb, 12, 7, 1, 12}, kBFloat16, direct.data(), 7);
    auto got = c1.to_vector<double>();
    for (size_t i = 0; i < direct.size(); ++i) EXPECT_EQ(got[i], bf16_value(direct[i])) << i;
  }
  // Gradients of a bfloat16 matmul are bfloat16 and equal g b^T, a^T g.
  Tensor x = randn({3, 4}).to(kBFloat16).requires_grad_(), y = randn({4, 5}).to(kBFloat16).requires_grad_();
  matmul(x, y).sum().backward();
  ASSERT_EQ(x.grad().dtype(), kBFloat16);
  auto gx = x.grad().to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 4; ++k) {
      double s = 0.0;
      for (int64_t j = 0; j < 5; ++j) s += yv[k * 5 + j];
      EXPECT_NEAR(gx[i * 4 + k], s, std::ldexp(std::abs(s), -8) + 1e-6);
    }
}

TEST(Gemm16, Float16MatmulIsComputedInFloat32) {
  // oneDNN 2.6 has no CPU float16 matmul: matmul converts (same values as
  // the float32 product rounded once to float16).
  manual_seed(8);
  Tensor a = randn({5, 6}).to(kFloat16), b = randn({6, 3}).to(kFloat16);
  Tensor c = matmul(a, b);
  ASSERT_EQ(c.dtype(), kFloat16);
  expect_same_values(c, matmul(a.to(kFloat32), b.to(kFloat32)).to(kFloat16), "f16 matmul");
}

// ---- GradScaler ----------------------------------------------------------------------------

/// A float32 linear regression with SGD + momentum (so skipped steps would
/// show in the optimizer state).
struct Rig {
  Rig() : model(3, 2), opt(model.parameters(), optim::SGDOptions(0.1).momentum(0.9)) {
    manual_seed(11);
    x = randn({8, 3});
    y = randn({8, 2});
  }
  Tensor loss() { return F::mse_loss(model.forward(x), y); }
  /// One iteration: zero_grad, scaled backward, optional inf in grad 0, step, update.
  bool iterate(amp::GradScaler &scaler, bool overflow) {
    opt.zero_grad();
    scaler.scale(loss()).backward();
    if (overflow) model.weight.grad().data_ptr<float>()[1] = INFINITY;
    const bool ran = scaler.step(opt);
    scaler.update();
    return ran;
  }
  nn::Linear model;
  optim::SGD opt;
  Tensor x, y;
};

TEST(GradScaler, DefaultsAreTorchs) {
  amp::GradScaler scaler;
  EXPECT_TRUE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.get_growth_factor(), 2.0);
  EXPECT_EQ(scaler.get_backoff_factor(), 0.5);
  EXPECT_EQ(scaler.get_growth_interval(), 2000);
  auto sd = scaler.state_dict();
  EXPECT_EQ(sd, (std::map<std::string, double>{{"scale", 65536.0},
                                               {"growth_factor", 2.0},
                                               {"backoff_factor", 0.5},
                                               {"growth_interval", 2000.0},
                                               {"_growth_tracker", 0.0}}));
}

TEST(GradScaler, ScaleMultipliesAndUnscaleDividesTheGradients) {
  Rig rig;
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024.0));
  Tensor loss = rig.loss();
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.sizes(), Shape{1});  // as PyTorch: loss * scale tensor of shape [1]
  EXPECT_EQ(scaled.item(), loss.item() * 1024.0);
  scaled.backward();
  std::vector<std::vector<float>> before;
  for (const Tensor &p : rig.model.parameters()) before.push_back(p.grad().to_vector<float>());
  scaler.unscale_(rig.opt);
  // Power-of-two scale: the unscaled gradients are exactly grads / scale,
  // and equal the gradients of the unscaled loss.
  std::vector<std::vector<float>> unscaled;
  size_t i = 0;
  for (const Tensor &p : rig.model.parameters()) {
    auto after = p.grad().to_vector<float>();
    for (size_t j = 0; j < after.size(); ++j) EXPECT_EQ(after[j], before[i][j] / 1024.0f);
    unscaled.push_back(after);
    ++i;
  }
  rig.opt.zero_grad();
  rig.loss().backward();
  i = 0;
  for (const Tensor &p : rig.model.parameters()) {
    auto plain = p.grad().to_vector<float>();
    for (size_t j = 0; j < plain.size(); ++j) EXPECT_FLOAT_EQ(unscaled[i][j], plain[j]);
    ++i;
  }
  // step() after unscale_ does not unscale again: the update is lr * g.
  std::vector<float> w0 = rig.model.weight.to_vector<float>();
  rig.opt.zero_grad();
  scaler.update(1024.0);  // new_scale: resets the iteration (allowed without checks)
  scaler.scale(rig.loss()).backward();
  scaler.unscale_(rig.opt);
  std::vector<float> g = rig.model.weight.grad().to_vector<float>();
  EXPECT_TRUE(scaler.step(rig.opt));
  std::vector<float> w1 = rig.model.weight.to_vector<float>();
  for (size_t j = 0; j < w0.size(); ++j) EXPECT_FLOAT_EQ(w1[j], w0[j] - 0.1f * g[j]);
}

TEST(GradScaler, OverflowSkipsTheStepAndHalvesTheScale) {
  Rig rig;
  amp::GradScaler scaler;
  ASSERT_TRUE(rig.iterate(scaler, false));
  ASSERT_EQ(scaler.growth_tracker(), 1);
  auto as_map = [](const std::vector<std::pair<std::string, Tensor>> &sd) {
    std::map<std::string, Tensor> m;
    for (auto &[k, t] : sd) m[k] = t.clone();
    return m;
  };
  auto params_before = as_map(rig.model.state_dict());
  auto opt_before = rig.opt.state_dict();
  EXPECT_FALSE(rig.iterate(scaler, true));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  for (auto &[name, t] : rig.model.state_dict()) expect_same_values(t, params_before.at(name), name);
  auto opt_after = rig.opt.state_dict();
  ASSERT_EQ(opt_after.state.size(), opt_before.state.size());
  for (auto &[name, t] : opt_after.state) expect_same_values(t, opt_before.state.at(name), name);
  // A NaN anywhere counts as well; the next clean step runs again.
  rig.opt.zero_grad();
  scaler.scale(rig.loss()).backward();
  rig.model.bias.grad().data_ptr<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(scaler.step(rig.opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 16384.0);
  EXPECT_TRUE(rig.iterate(scaler, false));
  EXPECT_NE(rig.model.weight.to_vector<float>(), params_before.at("weight").to_vector<float>());
}

TEST(GradScaler, GrowsAfterGrowthIntervalCleanSteps) {
  Rig rig;
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(8.0).growth_interval(3).growth_factor(4.0));
  rig.iterate(scaler, false);
  rig.iterate(scaler, false);
  EXPECT_EQ(scaler.get_scale(), 8.0);
  rig.iterate(scaler, false);
  EXPECT_EQ(scaler.get_scale(), 32.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  rig.iterate(scaler, false);
  rig.iterate(scaler, true);  // an overflow resets the count
  rig.iterate(scaler, false);
  rig.iterate(scaler, false);
  EXPECT_EQ(scaler.get_scale(), 16.0);
  rig.iterate(scaler, false);
  EXPECT_EQ(scaler.get_scale(), 64.0);
}

TEST(GradScaler, StateDictRoundTripContinuesIdentically) {
  Rig rig;
  amp::GradScaler a(amp::GradScalerOptions().growth_interval(2).backoff_factor(0.25));
  rig.iterate(a, false);
  rig.iterate(a, true);
  rig.iterate(a, false);
  auto sd = a.state_dict();
  EXPECT_EQ(sd.at("scale"), 16384.0);
  EXPECT_EQ(sd.at("_growth_tracker"), 1.0);
  amp::GradScaler b;  // different settings, replaced by the dict
  b.load_state_dict(sd);
  EXPECT_EQ(b.state_dict(), sd);
  for (bool overflow : {false, false, true, false, false, false}) {
    rig.iterate(a, overflow);
    rig.iterate(b, overflow);
    EXPECT_EQ(a.get_scale(), b.get_scale());
    EXPECT_EQ(a.growth_tracker(), b.growth_tracker());
  }
  EXPECT_EQ(a.get_scale(), 16384.0 * 2 / 4 * 2);
}

TEST(GradScaler, PerOptimizerChecksAndOneUpdate) {
  manual_seed(12);
  Tensor p1 = randn({3}).requires_grad_(), p2 = randn({3}).requires_grad_();
  optim::SGD o1({p1}, optim::SGDOptions(0.1)), o2({p2}, optim::SGDOptions(0.1));
  amp::GradScaler scaler;
  scaler.scale((p1 * p1).sum() + (p2 * p2).sum()).backward();
  p2.grad().data_ptr<float>()[0] = INFINITY;
  auto v1 = p1.to_vector<float>(), v2 = p2.to_vector<float>();
  EXPECT_TRUE(scaler.step(o1));   // o1's gradients are finite: it steps
  EXPECT_FALSE(scaler.step(o2));  // o2's are not: skipped
  scaler.update();                // any inf this iteration backs off
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_NE(p1.to_vector<float>(), v1);
  EXPECT_EQ(p2.to_vector<float>(), v2);
}

TEST(GradScaler, DisabledIsAPassThrough) {
  Rig rig;
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(false).growth_factor(0.5));  // not validated when disabled
  Tensor loss = rig.loss();
  EXPECT_EQ(scaler.scale(loss).impl(), loss.impl());
  loss.backward();
  auto g = rig.model.weight.grad().to_vector<float>();
  scaler.unscale_(rig.opt);
  EXPECT_EQ(rig.model.weight.grad().to_vector<float>(), g);
  auto w = rig.model.weight.to_vector<float>();
  EXPECT_TRUE(scaler.step(rig.opt));
  EXPECT_NE(rig.model.weight.to_vector<float>(), w);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
  scaler.load_state_dict({});  // no-op
}

TEST(GradScaler, Bf16GradientsAreUnscaledInFloat) {
  Tensor p = full({2}, 1.0).requires_grad_();
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(4.0));
  scaler.scale(p.sum());
  p.set_grad(tensor({12.0f, -6.0f}, {2}).to(kBFloat16));
  scaler.unscale_(opt);
  EXPECT_EQ(p.grad().dtype(), kBFloat16);
  EXPECT_EQ(p.grad().to_vector<float>(), (std::vector<float>{3.0f, -1.5f}));
}

// ---- bad input -----------------------------------------------------------------------------

using test_support::BadCase;

TEST(AmpBadInput, EveryCaseThrowsKilnErrorNamingTheProblem) {
  auto sgd = [] {
    static Tensor p = full({2}, 1.0).requires_grad_();
    return std::make_shared<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions(0.1));
  };
  auto scaled = [](amp::GradScaler &s, optim::Optimizer &o) {
    o.zero_grad();
    Tensor p = o.params()[0];
    s.scale((p * p).sum()).backward();
  };
  using Opts = amp::GradScalerOptions;
  std::vector<BadCase> cases = {
      {"autocast int64", [] { AutocastGuard g(kInt64); }, {"autocast", "int64", "bfloat16 or float16"}},
      {"autocast bool", [] { AutocastGuard g(kBool); }, {"autocast", "bool"}},
      {"autocast float32", [] { AutocastGuard g(kFloat32); }, {"autocast", "float32"}},
      {"autocast float64 disabled", [] { AutocastGuard g(kFloat64, false); }, {"autocast", "float64"}},
      {"scaler growth_factor 1", [] { amp::GradScaler s(Opts().growth_factor(1.0)); },
       {"GradScaler", "growth_factor", "> 1", "1"}},
      {"scaler backoff_factor 1", [] { amp::GradScaler s(Opts().backoff_factor(1.0)); },
       {"GradScaler", "backoff_factor", "(0, 1)"}},
      {"scaler backoff_factor 0", [] { amp::GradScaler s(Opts().backoff_factor(0.0)); }, {"backoff_factor", "0"}},
      {"scaler growth_interval 0", [] { amp::GradScaler s(Opts().growth_interval(0)); },
       {"GradScaler", "growth_interval", ">= 1", "0"}},
      {"scaler init_scale -1", [] { amp::GradScaler s(Opts().init_scale(-1.0)); }, {"init_scale", "-1"}},
      {"scaler init_scale inf", [] { amp::GradScaler s(Opts().init_scale(INFINITY)); }, {"init_scale", "inf"}},
      {"scaler set_growth_interval", [] { amp::GradScaler().set_growth_interval(-2); },
       {"set_growth_interval", "-2"}},
      {"scale int tensor", [] { amp::GradScaler().scale(ones({1}, kInt64)); }, {"GradScaler.scale", "int64"}},
      {"scale undefined", [] { amp::GradScaler().scale(Tensor()); }, {"GradScaler.scale", "undefined"}},
      {"unscale_ before scale", [sgd] {
         amp::GradScaler s;
         s.unscale_(*sgd());
       }, {"unscale_", "scale(loss"}},
      {"step before scale", [sgd] {
         amp::GradScaler s;
         s.step(*sgd());
       }, {"step", "scale(loss"}},
      {"unscale_ twice", [sgd, scaled] {
         amp::GradScaler s;
         auto o = sgd();
         scaled(s, *o);
         s.unscale_(*o);
         s.unscale_(*o);
       }, {"unscale_", "already been called", "update()"}},
      {"unscale_ after step", [sgd, scaled] {
         amp::GradScaler s;
         auto o = sgd();
         scaled(s, *o);
         s.step(*o);
         s.unscale_(*o);
       }, {"unscale_", "after step()"}},
      {"step twice", [sgd, scaled] {
         amp::GradScaler s;
         auto o = sgd();
         scaled(s, *o);
         s.step(*o);
         s.step(*o);
       }, {"step", "already been called"}},
      {"update without step", [] {
         amp::GradScaler s;
         s.scale(ones({1}));
         s.update();
       }, {"update", "No inf checks"}},
      {"update bad new_scale", [] {
         amp::GradScaler s;
         s.scale(ones({1}));
         s.update(0.0);
       }, {"update", "new_scale", "0"}},
      {"unscale_ fp16 grads", [] {
         Tensor p = full({2}, 1.0).requires_grad_();
         optim::SGD o({p}, optim::SGDOptions(0.1));
         amp::GradScaler s;
         s.scale(p.sum());
         p.set_grad(ones({2}, kFloat16));
         s.unscale_(o);
       }, {"unscale_", "FP16 gradients"}},
      {"load_state_dict empty", [] { amp::GradScaler().load_state_dict({}); }, {"load_state_dict", "empty", "disabled"}},
      {"load_state_dict missing key", [] {
         auto sd = amp::GradScaler().state_dict();
         sd.erase("_growth_tracker");
         amp::GradScaler().load_state_dict(sd);
       }, {"load_state_dict", "'_growth_tracker'"}},
      {"load_state_dict bad factor", [] {
         auto sd = amp::GradScaler().state_dict();
         sd["growth_factor"] = 0.5;
         amp::GradScaler().load_state_dict(sd);
       }, {"load_state_dict", "growth_factor", "0.5"}},
      {"load_state_dict fractional tracker", [] {
         auto sd = amp::GradScaler().state_dict();
         sd["_growth_tracker"] = 1.5;
         amp::GradScaler().load_state_dict(sd);
       }, {"load_state_dict", "_growth_tracker", "1.5"}},
  };
  test_support::expect_kiln_errors(cases);
  // A failed load changes nothing.
  amp::GradScaler s(amp::GradScalerOptions().init_scale(8.0));
  auto sd = s.state_dict();
  auto bad = sd;
  bad["scale"] = -1.0;
  bad["growth_interval"] = 7.0;
  EXPECT_THROW(s.load_state_dict(bad), Error);
  EXPECT_EQ(s.state_dict(), sd);
}

}  // namespace
}  // namespace kiln
