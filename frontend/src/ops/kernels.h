// kernels.h (internal) - strided iteration and dtype dispatch for the eager
// CPU kernels.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/tensor.h"
#include "../trace.h"

namespace kiln::kernels {

/// Visits every element of an N-operand iteration over `sizes` in row-major
/// order. `inner(offsets, n, inner_strides)` is called once per innermost
/// row with the element offsets of each operand at the row start.
template <size_t N, class F>
void for_each_row(const Shape &sizes, const std::array<const Shape *, N> &strides,
                  const std::array<int64_t, N> &base, F &&inner) {
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  for (int64_t s : sizes)
    if (s == 0) return;
  if (ndim == 0) {
    inner(base, int64_t{1}, std::array<int64_t, N>{});
    return;
  }
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = (*strides[k])[ndim - 1];
  const int64_t n = sizes[ndim - 1];
  std::vector<int64_t> idx(static_cast<size_t>(ndim), 0);
  std::array<int64_t, N> off = base;
  while (true) {
    inner(off, n, inner_strides);
    int64_t d = ndim - 2;
    for (; d >= 0; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) off[k] += (*strides[k])[d];
      if (idx[d] < sizes[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= (*strides[k])[d] * sizes[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

/// float <-> IEEE half / bfloat16 (round to nearest even).
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t float_to_half(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline float half_to_float(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

/// Reads element `off` of a buffer of dtype `t` as double (slow path).
inline double load_as_double(const void *base, DType t, int64_t off) {
  switch (t) {
  case DType::Float32: return static_cast<const float *>(base)[off];
  case DType::Int64: return static_cast<double>(static_cast<const int64_t *>(base)[off]);
  case DType::Bool: return static_cast<const uint8_t *>(base)[off] ? 1.0 : 0.0;
  case DType::Float16: return half_to_float(static_cast<const uint16_t *>(base)[off]);
  case DType::BFloat16: return bf16_to_float(static_cast<const uint16_t *>(base)[off]);
  case DType::Float64: return static_cast<const double *>(base)[off];
  case DType::Int32: return static_cast<const int32_t *>(base)[off];
  }
  return 0.0;
}

inline void store_from_double(void *base, DType t, int64_t off, double v) {
  switch (t) {
  case DType::Float32: static_cast<float *>(base)[off] = static_cast<float>(v); break;
  case DType::Int64: static_cast<int64_t *>(base)[off] = static_cast<int64_t>(v); break;
  case DType::Bool: static_cast<uint8_t *>(base)[off] = v != 0.0; break;
  case DType::Float16: static_cast<uint16_t *>(base)[off] = float_to_half(static_cast<float>(v)); break;
  case DType::BFloat16: static_cast<uint16_t *>(base)[off] = float_to_bf16(static_cast<float>(v)); break;
  case DType::Float64: static_cast<double *>(base)[off] = v; break;
  case DType::Int32: static_cast<int32_t *>(base)[off] = static_cast<int32_t>(v); break;
  }
}

/// Base pointer of a tensor's storage (offset not applied).
inline char *storage_base(const Tensor &t) { return static_cast<char *>(t.impl()->storage->data()); }

/// Calls f(T{}) with T the C++ type of a compute dtype (float32, float64,
/// int32, int64); throws naming `op` for other dtypes.
template <class F> void dispatch(DType t, const char *op, F &&f) {
  if (trace::skip_compute()) return;  // a lazy segment trace: values come from the compiled segment
  switch (t) {
  case DType::Float32: f(float{}); return;
  case DType::Float64: f(double{}); return;
  case DType::Int32: f(int32_t{}); return;
  case DType::Int64: f(int64_t{}); return;
  default: break;
  }
  KILN_CHECK(false, op, ": no kernel for dtype ", dtype_name(t));
}

// ---- Threading ---------------------------------------------------------------
//
// Kernels run on the OpenMP threads only for large tensors: below
// kParallelThreshold elements they call the loop inline (no parallel region,
// so the per-op overhead on small tensors does not change). Work is cut into
// chunks whose boundaries depend only on the sizes, never on the thread
// count, so reductions combine the same partial results in the same order
// whatever the number of threads (bitwise deterministic).

/// Elements an op must touch before it is split over threads.
constexpr int64_t kParallelThreshold = 32768;
/// Elements per chunk of an elementwise map.
constexpr int64_t kMapChunk = 32768;

/// A non-owning reference to a callable f(begin, end) (no allocation).
struct RangeFn {
  void (*call)(const void *ctx, int64_t begin, int64_t end);
  const void *ctx;
};

/// Calls fn on [c * chunk, min(n, (c + 1) * chunk)) for every chunk c, spread
/// over the OpenMP threads (defined in elementwise.cpp).
void parallel_chunks(int64_t n, int64_t chunk, RangeFn fn);

/// f(begin, end) over [0, n) in chunks of `chunk` items; in parallel only
/// when `work` (elements touched) reaches kParallelThreshold and there is
/// more than one chunk, else one inline call f(0, n).
template <class F> void parallel_for(int64_t n, int64_t chunk, int64_t work, F &&f) {
  if (n <= 0) return;
  if (work < kParallelThreshold || n <= chunk) {
    f(int64_t{0}, n);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  parallel_chunks(n, chunk,
                  RangeFn{[](const void *ctx, int64_t b, int64_t e) { (*static_cast<Fn *>(const_cast<void *>(ctx)))(b, e); },
                          static_cast<const void *>(&f)});
}

// ---- Strided iteration over a linear range -------------------------------------

/// An N-operand iteration space with size-1 dims dropped and adjacent dims
/// merged where every operand steps through them as one dim (row-major
/// element order is unchanged); nd == 0 means a single element. Fixed
/// storage (no allocation per op): every kept dim has size >= 2, so a
/// tensor that fits in memory has fewer than 64 of them.
constexpr int kMaxIterDims = 64;
template <size_t N> struct Iter {
  int64_t nd = 0;
  int64_t sizes[kMaxIterDims];
  int64_t strides[N][kMaxIterDims];
  std::array<int64_t, N> base{};
  int64_t numel = 1;
};

template <size_t N>
Iter<N> make_iter(const Shape &sizes, const std::array<const Shape *, N> &strides, const std::array<int64_t, N> &base) {
  Iter<N> it;
  it.base = base;
  for (int64_t s : sizes) it.numel *= s;
  if (it.numel == 0) return it;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (it.nd > 0) {
      const int64_t last = it.nd - 1;
      bool merge = true;
      for (size_t k = 0; k < N; ++k) merge &= it.strides[k][last] == (*strides[k])[d] * sizes[d];
      if (merge) {
        it.sizes[last] *= sizes[d];
        for (size_t k = 0; k < N; ++k) it.strides[k][last] = (*strides[k])[d];
        continue;
      }
    }
    it.sizes[it.nd] = sizes[d];
    for (size_t k = 0; k < N; ++k) it.strides[k][it.nd] = (*strides[k])[d];
    ++it.nd;
  }
  return it;
}

/// Visits the elements with row-major linear index in [begin, end):
/// `inner(w, offsets, n, inner_strides)` once per (piece of an) innermost
/// row, with w the linear index of its first element.
template <size_t N, class F> void for_each_row_range(const Iter<N> &it, int64_t begin, int64_t end, F &&inner) {
  if (begin >= end) return;
  const int64_t nd = it.nd;
  if (nd == 0) {
    inner(begin, it.base, int64_t{1}, std::array<int64_t, N>{});
    return;
  }
  int64_t idx[kMaxIterDims];
  std::array<int64_t, N> row = it.base;  // offsets of the current row's first element
  int64_t rem = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    idx[d] = rem % it.sizes[d];
    rem /= it.sizes[d];
    if (d < nd - 1)
      for (size_t k = 0; k < N; ++k) row[k] += idx[d] * it.strides[k][d];
  }
  std::array<int64_t, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = it.strides[k][nd - 1];
  const int64_t len = it.sizes[nd - 1];
  int64_t col = idx[nd - 1], w = begin;
  while (true) {
    const int64_t n = std::min(len - col, end - w);
    std::array<int64_t, N> off;
    for (size_t k = 0; k < N; ++k) off[k] = row[k] + col * st[k];
    inner(w, off, n, st);
    w += n;
    if (w >= end) return;
    col = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) row[k] += it.strides[k][d];
      if (idx[d] < it.sizes[d]) break;
      for (size_t k = 0; k < N; ++k) row[k] -= it.strides[k][d] * it.sizes[d];
      idx[d] = 0;
    }
  }
}

/// for_each_row_range over the whole space, in parallel chunks for large
/// spaces (each output position is written by exactly one call).
template <size_t N, class F> void parallel_rows(const Iter<N> &it, F &&inner) {
  parallel_for(it.numel, kMapChunk, it.numel, [&](int64_t b, int64_t e) { for_each_row_range(it, b, e, inner); });
}

// ---- float32 exp -----------------------------------------------------------------

/// exp for float32 without libm: Cephes-style range reduction x = n ln2 + r
/// (|r| <= ln2 / 2, ln2 split in two so n ln2 is exact), a degree-7
/// polynomial for e^r and 2^n applied as two exact power-of-two factors, so
/// results in the subnormal range are rounded once. Branch-free (GCC
/// vectorizes loops calling it); within 2 ulp of the correctly rounded
/// result; exp(+inf) = inf, exp(-inf) = 0, NaN in -> NaN out.
__attribute__((always_inline)) inline float exp_f32(float x) {
  x = x < -104.0f ? -104.0f : x;  // below: 0 (comparisons keep NaN)
  x = x > 89.0f ? 89.0f : x;      // above: inf
  const float t = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: round to nearest
  const float fn = t - 12582912.0f;
  uint32_t tbits;
  std::memcpy(&tbits, &t, 4);
  const int32_t n = static_cast<int32_t>(tbits - 0x4B400000u);
  float r = x - fn * 0.693359375f;  // ln2 = 0.693359375 - 2.12194440e-4 (hi part exact)
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t n1 = n >> 1, n2 = n - n1;  // n in [-150, 128]: both factors normal
  const uint32_t b1 = static_cast<uint32_t>(n1 + 127) << 23, b2 = static_cast<uint32_t>(n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}

/// y[i] = exp_f32(x[i]) for i < n (AVX-512F/AVX2/baseline clones, picked by CPU features at load
/// time; defined in elementwise.cpp).
void exp_f32_contiguous(const float *x, float *y, int64_t n);

// ---- Reductions ----------------------------------------------------------------

/// Elements per leaf block of a cascade sum and per parallel chunk of one
/// long reduction (a multiple of the block).
constexpr int64_t kSumBlock = 2048;
constexpr int64_t kSumChunk = 65536;

/// Sum of up to kSumBlock contiguous elements: kLanes independent
/// accumulators (vector registers), combined pairwise.
template <class T> T block_sum(const T *__restrict p, int64_t n) {
  constexpr int kLanes = std::is_same_v<T, float> ? 32 : 16;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += p[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += p[i];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

/// Pairwise (cascade) sum of n contiguous elements: blocks of kSumBlock,
/// split points at block multiples. Error grows like log(n), not n.
template <class T> T cascade_sum(const T *p, int64_t n) {
  if (n <= kSumBlock) return block_sum(p, n);
  const int64_t half = (n / kSumBlock + 1) / 2 * kSumBlock;
  return cascade_sum(p, half) + cascade_sum(p + half, n - half);
}

/// Sum of n contiguous elements: floats by cascade (over chunk partials
/// for n > kSumChunk), integers exactly. `parallel`: chunks may run on
/// other threads; the result is the same either way.
template <class T> T contiguous_sum(const T *p, int64_t n, bool parallel) {
  if constexpr (!std::is_floating_point_v<T>) {
    if (!parallel || n < kParallelThreshold) {
      T acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += p[i];
      return acc;
    }
  }
  if (n <= kSumChunk) return cascade_sum(p, n);
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<T> part(static_cast<size_t>(chunks));
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) part[c] = cascade_sum(p + c * kSumChunk, std::min(kSumChunk, n - c * kSumChunk));
  };
  if (parallel) parallel_for(chunks, 1, n, body);
  else body(0, chunks);
  return cascade_sum(part.data(), chunks);
}

/// max with NaN propagation (as torch.amax): a NaN in either argument wins
/// once it is in `best`, and a NaN `v` replaces any best.
template <class T> inline T max_propagate(T best, T v) { return (v > best || v != v) ? v : best; }
/// min with NaN propagation (as torch.amin).
template <class T> inline T min_propagate(T best, T v) { return (v < best || v != v) ? v : best; }

/// Largest (kMax) or smallest of n >= 1 contiguous elements (NaN if any is NaN).
template <bool kMax, class T> T contiguous_extreme(const T *__restrict p, int64_t n) {
  constexpr int kLanes = 16;
  constexpr T inf = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                         : std::numeric_limits<T>::max();
  const T init = kMax ? (std::numeric_limits<T>::has_infinity ? -inf : std::numeric_limits<T>::lowest()) : inf;
  auto combine = [](T best, T v) { return kMax ? max_propagate(best, v) : min_propagate(best, v); };
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = init;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = combine(acc[l], p[i + l]);
  for (int l = 0; i < n; ++i, ++l) acc[l] = combine(acc[l], p[i]);
  T m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = combine(m, acc[l]);
  return m;
}

/// Largest of n >= 1 contiguous elements (NaN if any is NaN).
template <class T> T contiguous_max(const T *__restrict p, int64_t n) { return contiguous_extreme<true>(p, n); }

/// A factory's freshly built host tensor placed on `device` (returned as is
/// when it is already there): a plain byte copy through the device's
/// backend, with no autograd history and no trace record (unlike
/// Tensor::to(Device), which a compiled graph treats as a graph break), so a
/// factory such as arange(n, dtype, device) inside a compiled forward is a
/// captured constant on the device, as it is on the cpu.
Tensor host_to_device(const Tensor &host, Device device);

/// The values of `t` (any device, any layout) in a contiguous cpu tensor: a
/// plain byte copy, no autograd, no trace record (kernel internals, such as
/// a device kernel's host-side check). `t` itself when it is on the cpu.
Tensor device_to_host(const Tensor &t);

/// Copies `src` (any layout, any dtype) into the contiguous tensor `dst`
/// (same shape), converting the element type.
void copy_into_contiguous(const Tensor &src, const Tensor &dst);

}  // namespace kiln::kernels
