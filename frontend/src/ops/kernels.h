// kernels.h (internal) - strided iteration and dtype dispatch for the eager
// CPU kernels.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kiln/tensor.h"

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
  switch (t) {
  case DType::Float32: f(float{}); return;
  case DType::Float64: f(double{}); return;
  case DType::Int32: f(int32_t{}); return;
  case DType::Int64: f(int64_t{}); return;
  default: break;
  }
  KILN_CHECK(false, op, ": no kernel for dtype ", dtype_name(t));
}

/// Copies `src` (any layout, any dtype) into the contiguous tensor `dst`
/// (same shape), converting the element type.
void copy_into_contiguous(const Tensor &src, const Tensor &dst);

}  // namespace kiln::kernels
