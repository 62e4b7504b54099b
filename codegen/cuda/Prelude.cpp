// The text every emitted kernel is compiled after (EmitCuda.h cudaPrelude).
// Portable C++17 that NVRTC and the host compiler both accept: no headers
// (NVRTC may have no toolkit headers at run time, TOOLCHAIN.md), 16-bit
// storage structs instead of cuda_fp16.h's types (PyTorch's jiterator
// embeds its own definitions the same way), device math by CUDA's names.
#include "EmitCuda.h"

namespace kiln::codegen::cuda {

namespace {

/// Storage types, bit casts and the f16/bf16 conversions. Round to nearest
/// even everywhere; NaN becomes the canonical quiet NaN 0x7fff, as PTX's
/// cvt.rn does, so the simulator and the GPU agree bit for bit.
const char *const kConversions = R"(// ---- kiln prelude: storage types and conversions ----
struct kiln_half { unsigned short bits; };
struct kiln_bf16 { unsigned short bits; };

__device__ __forceinline__ unsigned kiln_float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  unsigned u; __builtin_memcpy(&u, &f, sizeof u); return u;
#endif
}
__device__ __forceinline__ float kiln_bits_float(unsigned u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f; __builtin_memcpy(&f, &u, sizeof f); return f;
#endif
}

__device__ __forceinline__ double kiln_bits_double(unsigned long long u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double((long long)u);
#else
  double d; __builtin_memcpy(&d, &u, sizeof d); return d;
#endif
}

// float -> bfloat16, round to nearest even.
__device__ __forceinline__ unsigned short kiln_f32_to_bf16_bits(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  unsigned u = kiln_float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
#endif
}
__device__ __forceinline__ float kiln_bf16_bits_to_f32(unsigned short h) {
  return kiln_bits_float((unsigned)h << 16);
}

// float -> IEEE binary16, round to nearest even (subnormals, overflow to inf).
__device__ __forceinline__ unsigned short kiln_f32_to_f16_bits(float f) {
#ifdef __CUDA_ARCH__
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
#else
  const unsigned u = kiln_float_bits(f);
  const unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;                 // NaN
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a >= 0x38800000u) {                               // a normal half (>= 2^-14)
    unsigned r = a - 0x38000000u;                       // exponent bias 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return (unsigned short)(sign | (r >> 13));
  }
  if (a < 0x33000000u) return (unsigned short)sign;    // below 2^-25: zero
  const unsigned e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
  const unsigned shift = 126u - e;                      // to units of 2^-24: 14..24
  unsigned q = m >> shift;
  const unsigned rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return (unsigned short)(sign | q);
#endif
}
__device__ __forceinline__ float kiln_f16_bits_to_f32(unsigned short h) {
#ifdef __CUDA_ARCH__
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
#else
  const unsigned sign = ((unsigned)h & 0x8000u) << 16;
  unsigned e = ((unsigned)h >> 10) & 0x1fu, m = (unsigned)h & 0x3ffu;
  if (e == 0x1fu) return kiln_bits_float(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e == 0u) {
    if (m == 0u) return kiln_bits_float(sign);
    e = 113u;                                           // a subnormal: normalize
    while (!(m & 0x400u)) { m <<= 1; --e; }
    return kiln_bits_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  return kiln_bits_float(sign | ((e + 112u) << 23) | (m << 13));
#endif
}

// Loads widen a storage element to its compute type; stores round once.
__device__ __forceinline__ float kiln_load(kiln_half h) { return kiln_f16_bits_to_f32(h.bits); }
__device__ __forceinline__ float kiln_load(kiln_bf16 h) { return kiln_bf16_bits_to_f32(h.bits); }
__device__ __forceinline__ float kiln_load(float x) { return x; }
__device__ __forceinline__ double kiln_load(double x) { return x; }
__device__ __forceinline__ long long kiln_load(long long x) { return x; }
__device__ __forceinline__ int kiln_load(int x) { return x; }
__device__ __forceinline__ bool kiln_load(unsigned char x) { return x != 0; }
__device__ __forceinline__ void kiln_store(kiln_half *p, float x) { p->bits = kiln_f32_to_f16_bits(x); }
__device__ __forceinline__ void kiln_store(kiln_bf16 *p, float x) { p->bits = kiln_f32_to_bf16_bits(x); }
__device__ __forceinline__ void kiln_store(float *p, float x) { *p = x; }
__device__ __forceinline__ void kiln_store(double *p, double x) { *p = x; }
__device__ __forceinline__ void kiln_store(long long *p, long long x) { *p = x; }
__device__ __forceinline__ void kiln_store(int *p, int x) { *p = x; }
__device__ __forceinline__ void kiln_store(unsigned char *p, bool x) { *p = x ? 1 : 0; }
// An explicit kiln.convert to f16/bf16 inside a kernel: round, widen back.
__device__ __forceinline__ float kiln_round_f16(float x) { return kiln_f16_bits_to_f32(kiln_f32_to_f16_bits(x)); }
__device__ __forceinline__ float kiln_round_bf16(float x) { return kiln_bf16_bits_to_f32(kiln_f32_to_bf16_bits(x)); }

// N storage elements moved as one 16-byte (or narrower) access.
template <class T, int N> struct alignas(sizeof(T) * N) kiln_vec { T v[N]; };
)";

/// Scalar op helpers with PyTorch's semantics (cpu/EmitScalarMath.cpp,
/// aten/src/ATen/native/BinaryOps.h), one overload per compute type.
const char *const kScalarOps = R"(
// ---- kiln prelude: scalar ops (PyTorch's semantics) ----
template <class T> __device__ __forceinline__ bool kiln_isnan(T x) { return x != x; }
// maximum / minimum: NaN if either is NaN, else the larger / smaller, lhs on ties.
template <class T> __device__ __forceinline__ T kiln_maximum(T p, T q) {
  T r = p < q ? q : p;
  r = kiln_isnan(q) ? q : r;
  return kiln_isnan(p) ? p : r;
}
template <class T> __device__ __forceinline__ T kiln_minimum(T p, T q) {
  T r = p > q ? q : p;
  r = kiln_isnan(q) ? q : r;
  return kiln_isnan(p) ? p : r;
}
// relu as torch.relu (clamp_min): NaN and -0.0 pass through.
template <class T> __device__ __forceinline__ T kiln_relu(T x) { return x < T(0) ? T(0) : x; }
__device__ __forceinline__ long long kiln_abs(long long x) { return x < 0 ? -x : x; }
__device__ __forceinline__ float kiln_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double kiln_abs(double x) { return fabs(x); }
// Integer division truncates; a zero divisor gives 0 (a kernel cannot raise).
__device__ __forceinline__ long long kiln_div(long long a, long long d) { return d == 0 ? 0 : a / d; }
__device__ __forceinline__ float kiln_fmod(float a, float d) { return fmodf(a, d); }
__device__ __forceinline__ double kiln_fmod(double a, double d) { return fmod(a, d); }
__device__ __forceinline__ long long kiln_fmod(long long a, long long d) { return d == 0 ? 0 : a % d; }
// remainder: fmod, plus d where it is nonzero and the signs of d and it differ.
template <class T> __device__ __forceinline__ T kiln_remainder_of(T mod, T d) {
  return (mod != T(0) && ((d < T(0)) != (mod < T(0)))) ? mod + d : mod;
}
__device__ __forceinline__ float kiln_remainder(float a, float d) { return kiln_remainder_of(fmodf(a, d), d); }
__device__ __forceinline__ double kiln_remainder(double a, double d) { return kiln_remainder_of(fmod(a, d), d); }
__device__ __forceinline__ long long kiln_remainder(long long a, long long d) {
  return d == 0 ? 0 : kiln_remainder_of(a % d, d);
}
// floor_div: PyTorch's div_floor_floating / div_floor_integer.
__device__ __forceinline__ float kiln_floor_div(float a, float d) {
  const float mod = fmodf(a, d);
  float div = (a - mod) / d;
  if (mod != 0.0f && ((d < 0.0f) != (mod < 0.0f))) div -= 1.0f;
  if (d == 0.0f) return a / d;
  if (div == 0.0f) return copysignf(0.0f, a / d);
  const float flo = floorf(div);
  return div - flo > 0.5f ? flo + 1.0f : flo;
}
__device__ __forceinline__ double kiln_floor_div(double a, double d) {
  const double mod = fmod(a, d);
  double div = (a - mod) / d;
  if (mod != 0.0 && ((d < 0.0) != (mod < 0.0))) div -= 1.0;
  if (d == 0.0) return a / d;
  if (div == 0.0) return copysign(0.0, a / d);
  const double flo = floor(div);
  return div - flo > 0.5 ? flo + 1.0 : flo;
}
__device__ __forceinline__ long long kiln_floor_div(long long a, long long d) {
  if (d == 0) return 0;
  const long long q = a / d;
  return (a % d != 0 && ((a < 0) != (d < 0))) ? q - 1 : q;
}
// x^n for a constant n >= 1 in binary exponentiation order (the CPU target's pow).
template <class T> __device__ __forceinline__ T kiln_powi(T x, int n) {
  T result = x, base = x;
  bool first = true;
  while (n > 0) {
    if (n & 1) { result = first ? base : result * base; first = false; }
    n >>= 1;
    if (n > 0) base = base * base;
  }
  return result;
}
// Float -> integer as kiln.convert (truncation; NaN and out-of-range as the GPU's cvt.rzi saturates).
__device__ __forceinline__ long long kiln_to_i64(float x) { return (long long)x; }
__device__ __forceinline__ long long kiln_to_i64(double x) { return (long long)x; }
)";

/// Warp and block all-reductions (every thread gets the result), butterfly
/// order: fixed for a fixed launch, so sums are deterministic run to run.
const char *const kReductions = R"(
// ---- kiln prelude: reductions ----
struct kiln_sum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct kiln_max { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return kiln_maximum(a, b); } };
struct kiln_min { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return kiln_minimum(a, b); } };

template <class T, class Op> __device__ __forceinline__ T kiln_warp_allreduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
// A block all-reduce; `scratch` holds 32 T in shared memory. Every thread of
// the block must call it (it has barriers).
template <class T, class Op> __device__ __forceinline__ T kiln_block_allreduce(T v, Op op, T *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = kiln_warp_allreduce(v, op);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < warps; ++w) r = op(r, scratch[w]);
  return r;
}

// argmax / argmin: (value, index) pairs; NaN wins (the first NaN), then the
// larger (smaller), then the smaller index on ties: PyTorch's first index.
template <class T> struct kiln_arg { T v; long long i; };
template <bool IsMax> struct kiln_arg_op {
  template <class T> __device__ __forceinline__ kiln_arg<T> operator()(kiln_arg<T> a, kiln_arg<T> b) const {
    const bool an = kiln_isnan(a.v), bn = kiln_isnan(b.v);
    if (an || bn) return (an && (!bn || a.i < b.i)) ? a : b;
    if (a.v == b.v) return a.i < b.i ? a : b;
    return (IsMax ? a.v > b.v : a.v < b.v) ? a : b;
  }
};
template <class T, bool IsMax> __device__ __forceinline__ kiln_arg<T> kiln_warp_allreduce(kiln_arg<T> v, kiln_arg_op<IsMax> op) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    kiln_arg<T> o;
    o.v = __shfl_xor_sync(0xffffffffu, v.v, offset);
    o.i = __shfl_xor_sync(0xffffffffu, v.i, offset);
    v = op(v, o);
  }
  return v;
}
)";

} // namespace

const std::string &cudaPrelude() {
  static const std::string text = std::string(kConversions) + kScalarOps + kReductions;
  return text;
}

} // namespace kiln::codegen::cuda
