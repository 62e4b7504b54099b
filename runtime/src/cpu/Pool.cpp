// max_pool2d (kiln/runtime/Conv.h): window maxima with PyTorch's indices
// (aten/src/ATen/native/cpu/MaxPoolKernel.cpp: the first maximum; a NaN wins,
// the last one of a window),
// their scatter-add backward and its adjoint gather; 16-bit floats through
// float32 (as eager max_pool2d computes them, and as Conv.cpp does), so a
// backward's overlapping windows accumulate in float32 and round once.
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln/runtime/Conv.h"

#include "Half.h"

namespace kiln::runtime {
namespace {

/// Planes and sizes of one pooling problem.
struct Planes {
  int64_t count, H, W, OH, OW;
};

Planes planes_of(const std::array<int64_t, 4> &in, const std::array<int64_t, 4> &out) {
  return {in[0] * in[1], in[2], in[3], out[2], out[3]};
}

/// Max of the window starting at (h0, w0) (may start in the padding) and the
/// in-plane index of its first max.
template <class T>
std::pair<T, int64_t> window_max(const Planes &g, const Pool2dParams &p, const T *plane, int64_t h0, int64_t w0) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t arg = -1;
  const int64_t h_end = std::min(h0 + p.kernel[0], g.H), w_end = std::min(w0 + p.kernel[1], g.W);
  for (int64_t ih = std::max<int64_t>(h0, 0); ih < h_end; ++ih)
    for (int64_t iw = std::max<int64_t>(w0, 0); iw < w_end; ++iw) {
      const T v = plane[ih * g.W + iw];
      if (arg < 0 || v > best || v != v) {
        best = v;
        arg = ih * g.W + iw;
      }
    }
  return {best, arg};
}

template <class T>
void forward(const Planes &g, const Pool2dParams &p, const T *x, T *values, int64_t *indices) {
  for (int64_t plane = 0; plane < g.count; ++plane)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const T *in = x + plane * g.H * g.W;
        const auto [best, arg] = window_max(g, p, in, oh * p.stride[0] - p.padding[0], ow * p.stride[1] - p.padding[1]);
        const int64_t o = (plane * g.OH + oh) * g.OW + ow;
        if (values)
          values[o] = best;
        if (indices)
          indices[o] = arg;
      }
}

/// Scatter-add (to_plane) of `windows` into `plane`, or the gather back.
template <class T> void move_at_indices(const Planes &g, T *plane, T *windows, const int64_t *indices, bool to_plane) {
  const int64_t in_plane = g.H * g.W, out_plane = g.OH * g.OW;
  if (to_plane)
    std::fill(plane, plane + g.count * in_plane, T(0));
  for (int64_t pl = 0; pl < g.count; ++pl)
    for (int64_t o = 0; o < out_plane; ++o) {
      const int64_t at = indices[pl * out_plane + o];
      if (at < 0 || at >= in_plane)
        throw std::runtime_error("max_pool2d: index " + std::to_string(at) + " outside a plane of " +
                                 std::to_string(in_plane) + " elements");
      T &x = plane[pl * in_plane + at];
      if (to_plane)
        x += windows[pl * out_plane + o];
      else
        windows[pl * out_plane + o] = x;
    }
}

template <class T>
void run(MaxPoolOp op, const Pool2dParams &p, const Planes &g, const void *x, void *values, int64_t *indices) {
  T *in = const_cast<T *>(static_cast<const T *>(x));
  T *out = static_cast<T *>(values);
  switch (op) {
  case MaxPoolOp::Forward: return forward(g, p, in, out, indices);
  case MaxPoolOp::Backward: return move_at_indices(g, out, in, indices, /*to_plane=*/true);
  case MaxPoolOp::Gather: return move_at_indices(g, in, out, indices, /*to_plane=*/false);
  }
}

float widen_one(DType dtype, uint16_t bits) {
  return dtype == DType::BFloat16 ? cpu::bf16_to_float(bits) : cpu::half_to_float(bits);
}

/// `n` 16-bit elements of `dtype` at `data` as float32.
std::vector<float> widen(DType dtype, const void *data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  const auto *bits = static_cast<const uint16_t *>(data);
  for (int64_t i = 0; i < n; ++i)
    out[i] = widen_one(dtype, bits[i]);
  return out;
}

/// The 16-bit primitive: the operand widened to float32, the float32 kernel,
/// the written values rounded to nearest even back into `values`. The
/// backward (scatter) writes whole input planes, the others output windows.
void run_16(MaxPoolOp op, const Pool2dParams &p, const Planes &g, DType dtype, const void *x, void *values,
            int64_t *indices) {
  const int64_t in_numel = g.count * g.H * g.W, out_numel = g.count * g.OH * g.OW;
  const bool read_windows = op == MaxPoolOp::Backward;
  std::vector<float> fx = widen(dtype, x, read_windows ? out_numel : in_numel);
  const int64_t written = read_windows ? in_numel : out_numel;
  std::vector<float> fv(values ? static_cast<size_t>(written) : 0);
  run<float>(op, p, g, fx.data(), values ? fv.data() : nullptr, indices);
  auto *bits = static_cast<uint16_t *>(values);
  for (int64_t i = 0; bits && i < written; ++i)
    bits[i] = dtype == DType::BFloat16 ? cpu::float_to_bf16(fv[i]) : cpu::float_to_half(fv[i]);
}

} // namespace

void max_pool2d(MaxPoolOp op, const Pool2dParams &p, const std::array<int64_t, 4> &input,
                const std::array<int64_t, 4> &output, DType dtype, const void *x, void *values, int64_t *indices) {
  const Planes g = planes_of(input, output);
  if (dtype == DType::Float32)
    return run<float>(op, p, g, x, values, indices);
  if (dtype == DType::Float64)
    return run<double>(op, p, g, x, values, indices);
  if (dtype == DType::BFloat16 || dtype == DType::Float16)
    return run_16(op, p, g, dtype, x, values, indices);
  throw std::runtime_error(std::string("max_pool2d: no kernel for dtype ") + dtype_name(dtype) +
                           " (float32, float64, bfloat16, float16)");
}

} // namespace kiln::runtime
