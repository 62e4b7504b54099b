// bf16/f16 through compileGraph: fused kernels whose body ops are typed
// bf16/f16 (as kiln-autocast leaves them) compute in f32 and round once at
// the store, explicit converts round, 16-bit matmuls, and the autocast
// option's report. References are computed here in float/double from the
// same 16-bit inputs.
#include <gtest/gtest.h>


#include <cmath>
#include <cstdlib>
#include <cstring>

#include "GraphTestUtils.h"

using namespace kiln;
using kiln::ir::ElementType;
using kiln::ir::OpKind;
using runtime::TensorView;

namespace {

using namespace kiln::codegen_test;

/// float <-> 16-bit bits (round to nearest even; no NaNs in these tests).
uint16_t encode(ElementType type, float f) {
  if (type == ElementType::F16) {
    _Float16 h = static_cast<_Float16>(f);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return u;
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float decode(ElementType type, uint16_t u) {
  if (type == ElementType::F16) {
    _Float16 h;
    std::memcpy(&h, &u, 2);
    return static_cast<float>(h);
  }
  uint32_t w = static_cast<uint32_t>(u) << 16;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
float roundTo(ElementType type, float f) { return decode(type, encode(type, f)); }
DType dtypeOf(ElementType type) { return type == ElementType::F16 ? kFloat16 : kBFloat16; }
int significandBits(ElementType type) { return type == ElementType::F16 ? 11 : 8; }

/// One unit in the last place of `v` in `type`.
double ulp(ElementType type, double v) {
  int e = 0;
  std::frexp(v == 0 ? 1e-30 : v, &e);
  return std::ldexp(1.0, e - significandBits(type));
}

TensorView half(ElementType type, Shape shape, const std::vector<float> &values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    bits[i] = encode(type, values[i]);
  return tensor(std::move(shape), bits, dtypeOf(type));
}
std::vector<float> readHalf(ElementType type, const TensorView &v) {
  std::vector<float> out;
  for (uint16_t u : read<uint16_t>(v))
    out.push_back(decode(type, u));
  return out;
}

/// out = tanh(x * x + y) - exp(x * 0.5) * 0.25 and s = sum(x * y, 1), every
/// op and the constants typed `type`: the kernel must widen x and y,
/// compute everything in f32 and round out and s once each.
void checkFusedKernel(ElementType type) {
  SCOPED_TRACE(ir::toString(type));
  const int64_t R = 64, C = 33; // 33: a vector loop and a remainder
  GraphMaker m;
  int x = m.input({R, C}, type), y = m.input({R, C}, type);
  auto constant = [&](double v) {
    return m.node(OpKind::Constant, {}, {R, C}, type, [&](ir::Node &n) { n.scalar = v; });
  };
  int t = m.same(OpKind::Tanh, {m.same(OpKind::Add, {m.same(OpKind::Mul, {x, x}), y})});
  int e = m.same(OpKind::Mul, {m.same(OpKind::Exp, {m.same(OpKind::Mul, {x, constant(0.5)})}), constant(0.25)});
  int out = m.same(OpKind::Sub, {t, e});
  int s = m.node(OpKind::ReduceSum, {m.same(OpKind::Mul, {x, y})}, {R}, type, [](ir::Node &n) { n.ints = {1}; });
  auto compiled = compileOk(m.done({out, s}));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(R * C, 3), ys = values(R * C, 4);
  for (auto &v : xs)
    v = roundTo(type, v * 1.5f);
  for (auto &v : ys)
    v = roundTo(type, v);
  auto res = runOk(*compiled.forward, {half(type, {R, C}, xs), half(type, {R, C}, ys)});
  ASSERT_EQ(res.size(), 2u);
  ASSERT_EQ(res[0].dtype, dtypeOf(type));
  std::vector<float> got = readHalf(type, res[0]), sums = readHalf(type, res[1]);
  int exact = 0, exactPerOp = 0;
  for (int64_t i = 0; i < R * C; ++i) {
    const float a = xs[i], b = ys[i];
    const float want = roundTo(type, std::tanh(a * a + b) - std::exp(a * 0.5f) * 0.25f);
    // The same ops rounding after each one, as eager bf16/f16 ops do.
    auto r = [&](float v) { return roundTo(type, v); };
    const float perOp = r(r(std::tanh(r(r(a * a) + b))) - r(r(std::exp(r(a * 0.5f))) * 0.25f));
    // exp/tanh are polynomial approximations in the kernel (a few f32 ulps
    // from libm), which can move the final rounding by one ulp of `type`.
    EXPECT_NEAR(got[i], want, ulp(type, want)) << i << " x=" << a << " y=" << b;
    exact += got[i] == want;
    exactPerOp += perOp == want;
  }
  EXPECT_GE(exact, R * C * 95 / 100);
  EXPECT_GT(exact, exactPerOp) << "kernel intermediates must not be rounded";
  for (int64_t i = 0; i < R; ++i) {
    double want = 0, scale = 0;
    for (int64_t j = 0; j < C; ++j) {
      want += static_cast<double>(xs[i * C + j]) * ys[i * C + j];
      scale += std::abs(static_cast<double>(xs[i * C + j]) * ys[i * C + j]);
    }
    // f32 accumulation (any order), then one rounding to `type`.
    EXPECT_NEAR(sums[i], want, ulp(type, want) / 2 + 1e-6 * scale) << "row " << i;
  }
}

class codegen_Lowp : public ConformanceTest {};
INSTANTIATE_TEST_SUITE_P(cpu, codegen_Lowp, ::testing::Values(DeviceType::CPU), deviceName);
INSTANTIATE_TEST_SUITE_P(checking, codegen_Lowp, ::testing::Values(DeviceType::PrivateUse1), deviceName);

TEST_P(codegen_Lowp, Bf16FusedKernelComputesInF32AndRoundsOnce) { checkFusedKernel(ElementType::BF16); }
TEST_P(codegen_Lowp, F16FusedKernelComputesInF32AndRoundsOnce) { checkFusedKernel(ElementType::F16); }

/// The same bf16 kernels lowered with the software f32 <-> bf16 conversion
/// (what hosts without AVX512-BF16 get), in a child process started with
/// KILN_BF16_SOFTWARE=1 (read once per process) and no kernel cache.
TEST_P(codegen_Lowp, SoftwareBf16ConversionGivesTheSameResults) {
  if (std::getenv("KILN_BF16_SOFTWARE"))
    GTEST_SKIP() << "already the child";
  EXPECT_EQ(runThisTestInChild("codegen_Lowp.Bf16FusedKernelComputesInF32AndRoundsOnce:codegen_Lowp."
                               "ExplicitConvertsRound",
                               {{"KILN_BF16_SOFTWARE", "1"}, {"KILN_DISABLE_CACHE", "1"}}),
            0)
      << "the software-conversion run failed (its output is above)";
}

/// x (f32) -> bf16 -> f32, times 3: an explicit rounding, also inside a
/// kernel; a bf16 input -> f32 -> f16 -> f32 chain; a bf16 product -> i64
/// truncates.
TEST_P(codegen_Lowp, ExplicitConvertsRound) {
  GraphMaker m;
  int x = m.input({40}), h = m.input({40}, ElementType::BF16);
  int c = m.node(OpKind::Convert, {x}, {40}, ElementType::BF16);
  int d = m.node(OpKind::Convert, {c}, {40}, ElementType::F32);
  int out = m.same(OpKind::Mul, {d, m.constant({40}, 3.0)});
  int hf = m.node(OpKind::Convert, {h}, {40}, ElementType::F32);
  int h16 = m.node(OpKind::Convert, {hf}, {40}, ElementType::F16);
  int back = m.node(OpKind::Convert, {h16}, {40}, ElementType::F32);
  int hi = m.node(OpKind::Convert, {m.same(OpKind::Mul, {h, h})}, {40}, ElementType::I64);
  auto compiled = compileOk(m.done({out, back, hi}));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(40, 5), hs = values(40, 6);
  for (auto &v : xs)
    v *= 1.001f; // not bf16-representable
  for (auto &v : hs)
    v = roundTo(ElementType::BF16, v * 3.0f);
  auto res = runOk(*compiled.forward, {f32({40}, xs), half(ElementType::BF16, {40}, hs)});
  ASSERT_EQ(res.size(), 3u);
  std::vector<float> got = read<float>(res[0]), b = read<float>(res[1]);
  std::vector<int64_t> ints = read<int64_t>(res[2]);
  int rounded = 0;
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(got[i], roundTo(ElementType::BF16, xs[i]) * 3.0f) << i;
    rounded += roundTo(ElementType::BF16, xs[i]) != xs[i];
    EXPECT_EQ(b[i], roundTo(ElementType::F16, hs[i])) << i;
    // h * h is a kernel intermediate: not rounded to bf16 before the truncation.
    EXPECT_EQ(ints[i], static_cast<int64_t>(hs[i] * hs[i])) << i;
  }
  EXPECT_GT(rounded, 30);
}

/// y = x w^T in bf16/f16 through the 16-bit GEMMs: small integers, exact.
/// A multi-result bf16 fusion (as kiln-autocast leaves softmax's prologue):
/// relu yielded as f32 (a convert of a value the kernel already holds in
/// f32: an identity copy that canonicalization folds), sin yielded as bf16,
/// and a max over the middle dim. Each result must land in its own
/// destination (fuzzer seed 8100 graph 394: CSE merged relu's and sin's
/// inits and sin came back holding relu). References in float from the same
/// bf16 inputs.
TEST_P(codegen_Lowp, MultiResultBf16FusionKeepsEachResultInItsDestination) {
  const ElementType bf = ElementType::BF16;
  GraphMaker m;
  int x = m.input({2, 4, 3}, bf);
  int r = m.same(OpKind::Relu, {x});
  int rf = m.node(OpKind::Convert, {r}, {2, 4, 3}, ElementType::F32);
  int sn = m.same(OpKind::Sin, {r});
  int mx = m.node(OpKind::ReduceMax, {sn}, {2, 3}, bf, [](ir::Node &n) { n.ints = {1}; });
  auto compiled = compileOk(m.done({rf, sn, mx}));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(24, 21);
  for (auto &v : xs)
    v = roundTo(bf, v * 3.0f); // relu up to ~6: far from sin's range
  auto res = runOk(*compiled.forward, {half(bf, {2, 4, 3}, xs)});
  ASSERT_EQ(res.size(), 3u);
  std::vector<float> relu = read<float>(res[0]);
  std::vector<uint16_t> sinBits = read<uint16_t>(res[1]), maxBits = read<uint16_t>(res[2]);
  for (int i = 0; i < 24; ++i) {
    const float want = std::max(xs[i], 0.0f);
    EXPECT_EQ(relu[i], want) << i;
    EXPECT_NEAR(decode(bf, sinBits[i]), std::sin(want), 1.0 / 128) << i;
  }
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 3; ++c) {
      float want = -INFINITY;
      for (int t = 0; t < 4; ++t)
        want = std::max(want, std::sin(std::max(xs[b * 12 + t * 3 + c], 0.0f)));
      EXPECT_NEAR(decode(bf, maxBits[b * 3 + c]), want, 1.0 / 128) << b << ", " << c;
    }
}
TEST_P(codegen_Lowp, MatmulInBf16AndF16) {
  for (ElementType type : {ElementType::BF16, ElementType::F16}) {
    SCOPED_TRACE(ir::toString(type));
    GraphMaker m;
    int x = m.input({5, 7}, type), w = m.input({3, 7}, type);
    int wt = m.node(OpKind::Transpose, {w}, {7, 3}, type, [](ir::Node &n) { n.ints = {1, 0}; });
    int y = m.node(OpKind::Matmul, {x, wt}, {5, 3}, type);
    auto compiled = compileOk(m.done({y}));
    ASSERT_TRUE(compiled.forward);
    std::vector<float> xs(35), ws(21);
    for (int i = 0; i < 35; ++i)
      xs[i] = static_cast<float>(i % 7 - 3);
    for (int i = 0; i < 21; ++i)
      ws[i] = static_cast<float>(i % 5 - 2);
    auto res = runOk(*compiled.forward, {half(type, {5, 7}, xs), half(type, {3, 7}, ws)});
    ASSERT_EQ(res.size(), 1u);
    std::vector<float> got = readHalf(type, res[0]);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 3; ++j) {
        float want = 0;
        for (int k = 0; k < 7; ++k)
          want += xs[i * 7 + k] * ws[j * 7 + k];
        EXPECT_EQ(got[i * 3 + j], want) << i << "," << j;
      }
  }
}

/// CompileOptions::autocast on y = relu(x w^T + b): the GEMM runs in bf16
/// (operands rounded, f32 accumulation, product rounded), the rest in f32,
/// and the report says so.
TEST_P(codegen_Lowp, AutocastOptionAndReport) {
  GraphMaker m;
  int x = m.input({6, 9}), w = m.input({4, 9}), b = m.input({4});
  int wt = m.node(OpKind::Transpose, {w}, {9, 4}, ElementType::F32, [](ir::Node &n) { n.ints = {1, 0}; });
  int mm = m.node(OpKind::Matmul, {x, wt}, {6, 4});
  int y = m.same(OpKind::Relu, {m.same(OpKind::Add, {mm, m.node(OpKind::Broadcast, {b}, {6, 4})})});
  const ir::Graph graph = m.done({y});
  codegen::CompileOptions options;
  options.device = conformanceDevice();
  options.autocast = kBFloat16;
  codegen::CompiledGraph compiled;
  std::string error;
  ASSERT_TRUE(codegen::compileGraph(graph, options, &compiled, &error)) << error;
  EXPECT_EQ(compiled.autocast, "bf16");
  EXPECT_EQ(compiled.autocast_casts, 3); // x, w, the product back to f32
  ASSERT_FALSE(compiled.autocast_ops.empty());
  EXPECT_EQ(compiled.autocast_ops[0], (std::pair<std::string, int>{"matmul", 1}));
  std::vector<float> xs = values(54, 7), ws = values(36, 8), bs = values(4, 9);
  auto res = runOk(*compiled.forward, {f32({6, 9}, xs), f32({4, 9}, ws), f32({4}, bs)});
  ASSERT_EQ(res.size(), 1u);
  EXPECT_EQ(res[0].dtype, kFloat32);
  std::vector<float> got = read<float>(res[0]);
  const ElementType bf = ElementType::BF16;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) {
      float acc = 0;
      for (int k = 0; k < 9; ++k)
        acc += roundTo(bf, xs[i * 9 + k]) * roundTo(bf, ws[j * 9 + k]);
      const float want = std::max(roundTo(bf, acc) + bs[j], 0.0f);
      // The f32 sum's order may differ from oneDNN's: one bf16 ulp of the product.
      EXPECT_NEAR(got[i * 4 + j], want, ulp(bf, acc)) << i << "," << j;
    }

  options.autocast = kInt64;
  EXPECT_FALSE(codegen::compileGraph(graph, options, &compiled, &error));
  EXPECT_NE(error.find("autocast must be float32 (off), bfloat16 or float16, got int64"), std::string::npos) << error;
}

} // namespace
