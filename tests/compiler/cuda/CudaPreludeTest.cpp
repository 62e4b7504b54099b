// The prelude's f16/bf16 conversions (codegen/cuda/Prelude.cpp) run as
// kernels on the CUDA-on-CPU simulator against the CPU runtime's
// (runtime/src/cpu/Half.h): every 16-bit pattern widened, and narrowing's
// round-to-nearest-even on edge cases and 300000 random floats. (Emitted
// kernels on the simulator: CudaSimRunTest.cpp, CudaSimRowsTest.cpp.)
#include "EmitCuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "Half.h" // runtime/src/cpu: the reference conversions
#include "kiln/runtime/sim/Grid.h"
#include "kiln/runtime/sim/SimMemory.h"

namespace {

namespace sim = kiln::runtime::sim;
using kiln::codegen::cuda::cudaPrelude;

// ---- the prelude's f16/bf16 conversions on the simulator ----

const char *const kConversions = R"(
extern "C" __global__ void widen(const unsigned short *bits, float *f16, float *bf16, unsigned short *f16_back,
                                 unsigned short *bf16_back, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    f16[i] = kiln_f16_bits_to_f32(bits[i]);
    bf16[i] = kiln_bf16_bits_to_f32(bits[i]);
    f16_back[i] = kiln_f32_to_f16_bits(f16[i]);
    bf16_back[i] = kiln_f32_to_bf16_bits(bf16[i]);
  }
}
extern "C" __global__ void narrow(const float *in, unsigned short *f16, unsigned short *bf16, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    f16[i] = kiln_f32_to_f16_bits(in[i]);
    bf16[i] = kiln_f32_to_bf16_bits(in[i]);
  }
}
)";

/// `n` elements of T in simulator memory, freed at scope exit.
template <class T> struct SimArray {
  explicit SimArray(size_t n) : n(n), p(static_cast<T *>(sim::allocate(n * sizeof(T), "conversions"))) {}
  ~SimArray() { sim::deallocate(p); }
  T &operator[](size_t i) { return p[i]; }
  size_t n;
  T *p;
};

/// Launches kernel `name` of kConversions over `n` elements (args: the
/// pointers, then n).
void runConversion(const char *name, std::vector<void *> pointers, int n) {
  sim::HostKernel k = sim::load_module(cudaPrelude() + kConversions)->kernel(name);
  std::vector<void *> args;
  for (void *&p : pointers)
    args.push_back(&p);
  args.push_back(&n);
  sim::launch(k, {64}, {256}, 0, args.data());
}

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
  constexpr int kPatterns = 65536;
  SimArray<unsigned short> bits(kPatterns), f16Back(kPatterns), bf16Back(kPatterns);
  SimArray<float> f16(kPatterns), bf16(kPatterns);
  for (int h = 0; h < kPatterns; ++h)
    bits[h] = static_cast<unsigned short>(h);
  runConversion("widen", {bits.p, f16.p, bf16.p, f16Back.p, bf16Back.p}, kPatterns);
  for (uint32_t h = 0; h < kPatterns; ++h) {
    const auto b = static_cast<uint16_t>(h);
    EXPECT_TRUE(sameFloat(f16[h], kiln::runtime::cpu::half_to_float(b))) << h;
    EXPECT_TRUE(sameFloat(bf16[h], kiln::runtime::cpu::bf16_to_float(b))) << h;
    // Round trips are exact for every non-NaN pattern.
    if (!std::isnan(kiln::runtime::cpu::half_to_float(b)))
      EXPECT_EQ(f16Back[h], b) << h;
    if (!std::isnan(kiln::runtime::cpu::bf16_to_float(b)))
      EXPECT_EQ(bf16Back[h], b) << h;
  }
}

TEST(CudaPrelude, NarrowingRoundsToNearestEvenAsTheCpuRuntime) {
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
  const int n = static_cast<int>(cases.size());
  SimArray<float> in(n);
  SimArray<unsigned short> f16(n), bf16(n);
  std::memcpy(in.p, cases.data(), n * sizeof(float));
  runConversion("narrow", {in.p, f16.p, bf16.p}, n);
  for (int i = 0; i < n; ++i) {
    const float f = cases[i];
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(kiln::runtime::cpu::half_to_float(f16[i]))) << f;
      EXPECT_TRUE(std::isnan(kiln::runtime::cpu::bf16_to_float(bf16[i]))) << f;
      continue;
    }
    EXPECT_EQ(f16[i], kiln::runtime::cpu::float_to_half(f)) << std::hexfloat << f;
    EXPECT_EQ(bf16[i], kiln::runtime::cpu::float_to_bf16(f)) << std::hexfloat << f;
  }
}

} // namespace
