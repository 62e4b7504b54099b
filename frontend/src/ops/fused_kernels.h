// fused_kernels.h (internal) - loop helpers shared by the fused eager
// kernels (fused.h): a tensor seen as [outer, n, inner] around one dim,
// row-parallel loops, and contiguous loops written so GCC vectorizes them
// (restrict pointers, independent accumulators, no branches per element).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels.h"

namespace kiln::fused::detail {

#define KILN_FUSED_INLINE __attribute__((always_inline)) inline
/// The ISAs the float32 kernels are compiled for (picked by CPU features at
/// load time, as kernels::exp_f32_contiguous).
#define KILN_FUSED_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

/// A contiguous tensor as [outer, n, inner] around dim `dim` (n = its size).
struct RowLayout {
  int64_t outer = 1, n = 1, inner = 1;
};

inline RowLayout row_layout(const Shape &sizes, int64_t dim) {
  RowLayout l;
  for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
    if (d < dim) l.outer *= sizes[d];
    else if (d == dim) l.n = sizes[d];
    else l.inner *= sizes[d];
  }
  return l;
}

/// f(begin, end) over the `count` items of `per_item` elements each, in
/// chunks of about kernels::kMapChunk elements, on the OpenMP threads when
/// the whole touches kernels::kParallelThreshold elements. Chunk boundaries
/// depend only on the sizes (deterministic).
template <class F> void parallel_items(int64_t count, int64_t per_item, F &&f) {
  const int64_t chunk = std::max<int64_t>(1, kernels::kMapChunk / std::max<int64_t>(per_item, 1));
  kernels::parallel_for(count, chunk, count * per_item, f);
}

/// exp in the kernels' precision: the vectorizable kernels::exp_f32 for
/// float32 (the composite's exp kernel), std::exp for float64.
template <class T> KILN_FUSED_INLINE T exp_of(T v) {
  if constexpr (std::is_same_v<T, float>) return kernels::exp_f32(v);
  else return std::exp(v);
}

/// Sum of a[i] * b[i] over n contiguous elements (16 independent lanes).
template <class T> KILN_FUSED_INLINE T dot(const T *__restrict a, const T *__restrict b, int64_t n) {
  constexpr int kLanes = 16;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

/// Sum of n contiguous elements (16 independent lanes).
template <class T> KILN_FUSED_INLINE T row_sum(const T *__restrict a, int64_t n) {
  constexpr int kLanes = 16;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l];
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i];
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

/// Largest of n >= 1 contiguous elements, NaN if any is NaN (as
/// kernels::contiguous_max; `|` instead of `||` keeps the select branch-free,
/// so the loop vectorizes).
template <class T> KILN_FUSED_INLINE T row_max(const T *__restrict a, int64_t n) {
  constexpr int kLanes = 16;
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -std::numeric_limits<T>::infinity();
  auto take = [](T best, T v) { return ((v > best) | (v != v)) ? v : best; };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = take(acc[l], a[i + l]);
  for (int l = 0; i < n; ++i, ++l) acc[l] = take(acc[l], a[i]);
  T m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = take(m, acc[l]);
  return m;
}

/// Sum of exp(x[i] - m) over n contiguous elements (16 lanes); with kWrite,
/// also y[i] = exp(x[i] - m) (one pass for softmax's numerator and sum).
template <bool kWrite, class T>
KILN_FUSED_INLINE T exp_shifted_sum(const T *__restrict x, T m, T *__restrict y, int64_t n) {
  constexpr int kLanes = 16;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T e = exp_of<T>(x[i + l] - m);
      if constexpr (kWrite) y[i + l] = e;
      acc[l] += e;
    }
  for (int l = 0; i < n; ++i, ++l) {
    const T e = exp_of<T>(x[i] - m);
    if constexpr (kWrite) y[i] = e;
    acc[l] += e;
  }
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

}  // namespace kiln::fused::detail
