// Emitted pointwise kernels and the prelude compiled with the host g++ and
// run (HostKernel.h's sequential launcher: no barriers, no shuffles), against
// C++ references: PyTorch's rules for the division modes and rounding, the
// CPU runtime's f16/bf16 conversions (runtime/src/cpu/Half.h) for storage.
#include "FuseForTests.h"
#include "HostKernel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "Half.h" // runtime/src/cpu: the reference conversions

namespace {

using kiln::codegen::cuda::cudaPrelude;
using kiln::test::EmittedKernel;

/// A kernel built for the host; run(args) launches it on `grid` x `block`.
struct HostKernel {
  explicit HostKernel(const EmittedKernel &k)
      : lib(kiln::test::hostShim() + cudaPrelude() + k.source + kiln::test::hostLauncher(k)) {}
  void run(std::vector<void *> args, unsigned grid = 3, unsigned block = 5) {
    auto launch = reinterpret_cast<kiln::test::HostLaunch>(lib.symbol("kiln_host_launch"));
    ASSERT_TRUE(launch) << lib.error();
    launch(args.data(), grid, block);
  }
  kiln::test::HostLibrary lib;
};

const char *const kChain = R"(
func.func @f(%a: tensor<3x37xf32>, %b: tensor<3x37xf32>) -> (tensor<3x37xf32>, tensor<3x37xf32>) {
  %0 = kiln.mul %a, %b : tensor<3x37xf32>
  %1 = kiln.exp %0 : tensor<3x37xf32>
  %2 = kiln.sub %1, %a : tensor<3x37xf32>
  return %2, %0 : tensor<3x37xf32>, tensor<3x37xf32>
})";

// 111 elements: 27 float4 vectors and a tail of 3; two results (multi-output).
TEST(CudaHostRun, PointwiseVectorPathTailAndTwoResults) {
  EmittedKernel k = kiln::test::emit(kChain);
  ASSERT_NE(k.source.find("kiln_vec<float, 4>"), std::string::npos);
  HostKernel host(k);
  ASSERT_EQ(host.lib.error(), "");
  std::vector<float> a(111), b(111), out0(111, -1), out1(111, -1);
  for (int i = 0; i < 111; ++i) {
    a[i] = 0.01f * i - 0.5f;
    b[i] = 1.0f - 0.02f * i;
  }
  // Parameter order: operands, then results (k.params); kiln-fuse orders
  // results by program order: the product, then the chain.
  host.run({a.data(), b.data(), out1.data(), out0.data()});
  for (int i = 0; i < 111; ++i) {
    const float m = a[i] * b[i];
    EXPECT_EQ(out1[i], m) << i;
    EXPECT_NEAR(out0[i], std::exp(m) - a[i], 1e-6f) << i;
  }
}

TEST(CudaHostRun, TransposedAndBroadcastOperandsUseTheirStrides) {
  EmittedKernel k = kiln::test::emit(R"(
func.func @views(%a: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %at = kiln.transpose %a [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %bb = kiln.broadcast %b : tensor<8xf32> -> tensor<4x8xf32>
  %0 = kiln.mul %at, %bb : tensor<4x8xf32>
  %1 = kiln.sub %0, %at : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
})");
  EXPECT_EQ(k.source.find("kiln_vec"), std::string::npos) << "strided operands are not vectorized";
  HostKernel host(k);
  ASSERT_EQ(host.lib.error(), "");
  std::vector<float> a(32), b(8), out(32);
  for (int i = 0; i < 32; ++i)
    a[i] = static_cast<float>(i);
  for (int j = 0; j < 8; ++j)
    b[j] = 0.5f + j;
  host.run({a.data(), b.data(), out.data()});
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 8; ++c) {
      const float at = a[c * 4 + r]; // a^T[r][c]
      EXPECT_EQ(out[r * 8 + c], at * b[c] - at) << r << "," << c;
    }
}

TEST(CudaHostRun, Bf16IsStorageComputedInF32RoundedOnce) {
  EmittedKernel k = kiln::test::emit(R"(
func.func @bf16(%a: tensor<3x37xbf16>, %b: tensor<3x37xbf16>) -> tensor<3x37xbf16> {
  %0 = kiln.mul %a, %b : tensor<3x37xbf16>
  %1 = kiln.add %0, %a : tensor<3x37xbf16>
  return %1 : tensor<3x37xbf16>
})");
  ASSERT_NE(k.source.find("kiln_vec<kiln_bf16, 8>"), std::string::npos) << k.source;
  HostKernel host(k);
  ASSERT_EQ(host.lib.error(), "");
  using kiln::runtime::cpu::bf16_to_float;
  using kiln::runtime::cpu::float_to_bf16;
  std::vector<uint16_t> a(111), b(111), out(111);
  for (int i = 0; i < 111; ++i) {
    a[i] = float_to_bf16(0.37f * i - 20.0f);
    b[i] = float_to_bf16(1.0f / (i + 3));
  }
  host.run({a.data(), b.data(), out.data()});
  for (int i = 0; i < 111; ++i) {
    const float x = bf16_to_float(a[i]), y = bf16_to_float(b[i]);
    EXPECT_EQ(out[i], float_to_bf16(x * y + x)) << i; // the product is not rounded to bf16
  }
}

TEST(CudaHostRun, DivisionModesFollowPyTorch) {
  // Two fusions: the float ops and the integer ops share no operand.
  const char *text = R"(
func.func @modes(%a: tensor<8xf32>, %b: tensor<8xf32>, %p: tensor<8xi64>, %q: tensor<8xi64>)
    -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xi64>, tensor<8xi64>, tensor<8xi64>, tensor<8xi64>) {
  %0 = kiln.floor_div %a, %b : tensor<8xf32>
  %1 = kiln.remainder %a, %b : tensor<8xf32>
  %2 = kiln.fmod %a, %b : tensor<8xf32>
  %3 = kiln.floor_div %p, %q : tensor<8xi64>
  %4 = kiln.remainder %p, %q : tensor<8xi64>
  %5 = kiln.fmod %p, %q : tensor<8xi64>
  %6 = kiln.div %p, %q : tensor<8xi64>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xi64>, tensor<8xi64>, tensor<8xi64>, tensor<8xi64>
})";
  EmittedKernel kf = kiln::test::emit(text, 0), ki = kiln::test::emit(text, 1);
  ASSERT_EQ(kf.params.size(), 5u);
  ASSERT_EQ(ki.params.size(), 6u);
  HostKernel host(kf), hostInt(ki);
  ASSERT_EQ(hostInt.lib.error(), "");
  ASSERT_EQ(host.lib.error(), "");
  std::vector<float> a = {7, -7, 7, -7, 5.5f, -0.5f, 3, 1}, b = {2, 2, -2, -2, 1.5f, 4, 0, 0};
  std::vector<long long> p = {7, -7, 7, -7, 9, -1, 3, 0}, q = {2, 2, -2, -2, 3, 4, 0, 5};
  std::vector<float> fd(8), rem(8), fm(8);
  std::vector<long long> ifd(8), irem(8), ifm(8), idiv(8);
  host.run({a.data(), b.data(), fd.data(), rem.data(), fm.data()});
  hostInt.run({p.data(), q.data(), ifd.data(), irem.data(), ifm.data(), idiv.data()});
  // torch.div(rounding_mode="floor"), torch.remainder (divisor's sign), torch.fmod (dividend's sign).
  const std::vector<float> fdRef = {3, -4, -4, 3, 3, -1, INFINITY, INFINITY};
  const std::vector<float> remRef = {1, 1, -1, -1, 1, 3.5f};
  const std::vector<float> fmRef = {1, -1, 1, -1, 1, -0.5f};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(fd[i], fdRef[i]) << i;
    EXPECT_EQ(rem[i], remRef[i]) << i;
    EXPECT_EQ(fm[i], fmRef[i]) << i;
  }
  EXPECT_EQ(fd[6], INFINITY); // 3 / 0
  EXPECT_TRUE(std::isnan(rem[6]) && std::isnan(fm[6]));
  // Integers: Python's // and %; a zero divisor gives 0 (a kernel cannot raise).
  const std::vector<long long> ifdRef = {3, -4, -4, 3, 3, -1, 0, 0}, iremRef = {1, 1, -1, -1, 0, 3, 0, 0};
  const std::vector<long long> ifmRef = {1, -1, 1, -1, 0, -1, 0, 0}, idivRef = {3, -3, -3, 3, 3, 0, 0, 0};
  EXPECT_EQ(ifd, ifdRef);
  EXPECT_EQ(irem, iremRef);
  EXPECT_EQ(ifm, ifmRef);
  EXPECT_EQ(idiv, idivRef);
}

TEST(CudaHostRun, RoundHalfToEvenCompareSelectConvert) {
  EmittedKernel k = kiln::test::emit(R"(
func.func @rcs(%a: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xi1>, tensor<8xf32>, tensor<8xi64>) {
  %r = kiln.round %a : tensor<8xf32>
  %c = kiln.compare gt, %a, %b : tensor<8xf32>
  %s = kiln.select %c, %a, %b : tensor<8xf32>
  %m = kiln.maximum %a, %b : tensor<8xf32>
  %t = kiln.add %s, %m : tensor<8xf32>
  %i = kiln.convert %a : tensor<8xf32> -> tensor<8xi64>
  return %r, %c, %t, %i : tensor<8xf32>, tensor<8xi1>, tensor<8xf32>, tensor<8xi64>
})");
  HostKernel host(k);
  ASSERT_EQ(host.lib.error(), "");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> a = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.7f, nan, 1}, b = {0, 2, 2, 0, -3, 4, 0, nan};
  std::vector<float> r(8), t(8);
  std::vector<unsigned char> c(8, 7);
  std::vector<long long> i(8);
  host.run({a.data(), b.data(), r.data(), c.data(), t.data(), i.data()});
  const std::vector<float> rRef = {0, 2, 2, -0.0f, -2, 4};
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(r[j], rRef[j]) << j;
    EXPECT_EQ(std::signbit(r[j]), std::signbit(rRef[j])) << j;
  }
  EXPECT_EQ(c, (std::vector<unsigned char>{1, 0, 1, 0, 1, 0, 0, 0})); // NaN compares false
  // select(a > b, a, b) + maximum(a, b): maximum propagates NaN.
  for (int j = 0; j < 6; ++j)
    EXPECT_EQ(t[j], 2 * std::max(a[j], b[j])) << j;
  EXPECT_TRUE(std::isnan(t[6]) && std::isnan(t[7]));
  EXPECT_EQ(i[5], 3); // truncation toward zero
  EXPECT_EQ(i[4], -2);
}

// ---- the prelude's f16/bf16 conversions on the host ----

/// The prelude's conversions as plain host functions.
struct PreludeConversions {
  PreludeConversions()
      : lib(std::string(kiln::test::hostShim()) + cudaPrelude() + R"(
extern "C" float t_f16_to_f32(unsigned short h) { return kiln_f16_bits_to_f32(h); }
extern "C" unsigned short t_f32_to_f16(float f) { return kiln_f32_to_f16_bits(f); }
extern "C" float t_bf16_to_f32(unsigned short h) { return kiln_bf16_bits_to_f32(h); }
extern "C" unsigned short t_f32_to_bf16(float f) { return kiln_f32_to_bf16_bits(f); }
)") {
    f16_to_f32 = reinterpret_cast<float (*)(unsigned short)>(lib.symbol("t_f16_to_f32"));
    f32_to_f16 = reinterpret_cast<unsigned short (*)(float)>(lib.symbol("t_f32_to_f16"));
    bf16_to_f32 = reinterpret_cast<float (*)(unsigned short)>(lib.symbol("t_bf16_to_f32"));
    f32_to_bf16 = reinterpret_cast<unsigned short (*)(float)>(lib.symbol("t_f32_to_bf16"));
  }
  kiln::test::HostLibrary lib;
  float (*f16_to_f32)(unsigned short) = nullptr;
  unsigned short (*f32_to_f16)(float) = nullptr;
  float (*bf16_to_f32)(unsigned short) = nullptr;
  unsigned short (*f32_to_bf16)(float) = nullptr;
};

bool sameFloat(float x, float y) {
  if (std::isnan(x) || std::isnan(y))
    return std::isnan(x) && std::isnan(y);
  uint32_t a, b;
  std::memcpy(&a, &x, 4);
  std::memcpy(&b, &y, 4);
  return a == b;
}

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CudaPrelude, EveryHalfAndBf16BitPatternWidensAsTheCpuRuntime) {
  PreludeConversions p;
  ASSERT_TRUE(p.f16_to_f32) << p.lib.error();
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    EXPECT_TRUE(sameFloat(p.f16_to_f32(bits), kiln::runtime::cpu::half_to_float(bits))) << h;
    EXPECT_TRUE(sameFloat(p.bf16_to_f32(bits), kiln::runtime::cpu::bf16_to_float(bits))) << h;
    // Round trips are exact for every non-NaN pattern.
    if (!std::isnan(kiln::runtime::cpu::half_to_float(bits)))
      EXPECT_EQ(p.f32_to_f16(p.f16_to_f32(bits)), bits) << h;
    if (!std::isnan(kiln::runtime::cpu::bf16_to_float(bits)))
      EXPECT_EQ(p.f32_to_bf16(p.bf16_to_f32(bits)), bits) << h;
  }
}

TEST(CudaPrelude, NarrowingRoundsToNearestEvenAsTheCpuRuntime) {
  PreludeConversions p;
  ASSERT_TRUE(p.f32_to_f16) << p.lib.error();
  std::vector<float> cases = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e30f, -1e30f, INFINITY, -INFINITY,
                              std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                              fromBits(0x7f800001u),  // a signaling NaN
                              std::ldexp(1.0f, -14),  // the smallest normal half
                              std::ldexp(1.0f, -24),  // the smallest subnormal half
                              std::ldexp(1.0f, -25),  // a tie between 0 and 2^-24: even is 0
                              std::ldexp(1.5f, -25),  // rounds up to 2^-24
                              std::ldexp(3.0f, -25),  // a tie between 2^-24 and 2^-23: even
                              1.0f + std::ldexp(1.0f, -11), // a tie in f16: to 1.0
                              1.0f + std::ldexp(3.0f, -11), // a tie: up to even
                              1.0f + std::ldexp(1.0f, -8),  // a tie in bf16: to 1.0
                              1.0f + std::ldexp(3.0f, -8),  // a tie: up to even
                              std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::max()};
  std::mt19937 rng(14);
  for (int i = 0; i < 300000; ++i)
    cases.push_back(fromBits(rng()));
  for (float f : cases) {
    const uint16_t h = p.f32_to_f16(f), ref = kiln::runtime::cpu::float_to_half(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(kiln::runtime::cpu::half_to_float(h))) << f;
      EXPECT_TRUE(std::isnan(kiln::runtime::cpu::bf16_to_float(p.f32_to_bf16(f)))) << f;
      continue;
    }
    EXPECT_EQ(h, ref) << std::hexfloat << f;
    EXPECT_EQ(p.f32_to_bf16(f), kiln::runtime::cpu::float_to_bf16(f)) << std::hexfloat << f;
  }
}

} // namespace
