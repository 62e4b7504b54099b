// Convolution and pooling: conv2d (im2col + GEMM, as Caffe/PyTorch's
// slow_conv2d), max_pool2d (primitive with saved argmax indices) and
// avg_pool2d (a composite: a depthwise conv2d with constant weights).
//
// conv2d is three primitives that are each other's gradients, so every
// backward formula is itself differentiable (y = B(x, w) is bilinear):
//   forward       y  = conv(x, w)
//   input grad    gx = conv_input_grad(gy, w)   (a transposed convolution)
//   weight grad   gw = conv_weight_grad(x, gy)
// max_pool2d's backward is likewise a scatter whose gradient is a gather.
// float32 uses runtime::sgemm (oneDNN); float64 a plain loop; float16 and
// bfloat16 are computed in float32. None of these is capturable by
// kiln::compile yet: each is a trace::GraphBreak (runs eagerly between
// compiled segments).
#include <algorithm>
#include <array>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/runtime/Gemm.h"
#include "ops/dispatch.h"
#include "ops/kernels.h"
#include "trace.h"
#include "amp/autocast.h"

namespace kiln::nn {
namespace detail {
// Internal primitives (external linkage so tests can gradcheck them).
struct ConvParams {
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
};
Tensor conv2d_forward(const Tensor &x, const Tensor &w, const ConvParams &p);
Tensor conv2d_input_grad(const Tensor &gy, const Tensor &w, const Shape &x_shape, const ConvParams &p);
Tensor conv2d_weight_grad(const Tensor &x, const Tensor &gy, const Shape &w_shape, const ConvParams &p);
Tensor max_pool2d_scatter(const Tensor &gy, const Tensor &indices, const Shape &x_shape);
Tensor max_pool2d_gather(const Tensor &gx, const Tensor &indices);
} // namespace detail

namespace {

using autograd::TensorList;
using detail::ConvParams;

/// Sizes of one convolution: input [N, C, H, W], weight [O, Cg, kH, kW]
/// with Cg = C / groups, output [N, O, OH, OW].
struct Geometry {
  int64_t N, C, H, W, O, Cg, Og, kH, kW, OH, OW;
  ConvParams p;
  int64_t col_rows() const { return Cg * kH * kW; }
  int64_t col_cols() const { return OH * OW; }
};

Geometry geometry(const Shape &x, const Shape &w, const ConvParams &p) {
  Geometry g{};
  g.N = x[0], g.C = x[1], g.H = x[2], g.W = x[3];
  g.O = w[0], g.Cg = w[1], g.kH = w[2], g.kW = w[3];
  g.Og = g.O / p.groups;
  g.OH = (g.H + 2 * p.padding[0] - p.dilation[0] * (g.kH - 1) - 1) / p.stride[0] + 1;
  g.OW = (g.W + 2 * p.padding[1] - p.dilation[1] * (g.kW - 1) - 1) / p.stride[1] + 1;
  g.p = p;
  return g;
}

/// A contiguous tensor with the data of `t` and no autograd history.
Tensor dense(const Tensor &t) {
  if (t.is_contiguous())
    return t.detach();
  Tensor c = Tensor::empty(t.sizes(), t.dtype(), t.device());
  kernels::copy_into_contiguous(t, c);
  return c;
}

/// Calls f(T{}) for float32 / float64; throws naming `op` otherwise.
template <class F> void dispatch_float(DType t, const char *op, F &&f) {
  if (t == kFloat32)
    return f(float{});
  if (t == kFloat64)
    return f(double{});
  KILN_CHECK(false, op, ": no kernel for dtype ", dtype_name(t));
}

/// A strided matrix: element (i, j) is data[i * rs + j * cs].
template <class T> struct Mat {
  const T *data;
  int64_t rows, cols, rs, cs;
};

/// C = A B with C contiguous [A.rows, B.cols] (overwritten).
template <class T> void gemm(const Mat<T> &a, const Mat<T> &b, T *c) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  if (M == 0 || N == 0)
    return;
  if (K == 0) {
    std::fill(c, c + M * N, T(0));
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    runtime::sgemm({a.data, M, K, a.rs, a.cs}, {b.data, K, N, b.rs, b.cs}, c, N);
  } else {
    std::fill(c, c + M * N, T(0));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) {
        const T aik = a.data[i * a.rs + k * a.cs];
        for (int64_t j = 0; j < N; ++j)
          c[i * N + j] += aik * b.data[k * b.rs + j * b.cs];
      }
  }
}

/// Input row of output row `o` at kernel tap `k` along one axis.
inline int64_t tap(int64_t o, int64_t k, int64_t axis, const ConvParams &p) {
  return o * p.stride[axis] - p.padding[axis] + k * p.dilation[axis];
}

/// im2col: unfolds Cg input planes into cols [Cg*kH*kW, OH*OW] (zero outside
/// the input). With kFold it is the adjoint, col2im: adds cols back into x.
template <class T, bool kFold> void unfold(const Geometry &g, T *x, T *cols) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t kh = 0; kh < g.kH; ++kh)
      for (int64_t kw = 0; kw < g.kW; ++kw) {
        T *row = cols + ((c * g.kH + kh) * g.kW + kw) * g.col_cols();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const int64_t ih = tap(oh, kh, 0, g.p);
          T *dst = row + oh * g.OW;
          if (ih < 0 || ih >= g.H) {
            if constexpr (!kFold)
              std::fill(dst, dst + g.OW, T(0));
            continue;
          }
          T *src = x + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            const int64_t iw = tap(ow, kw, 1, g.p);
            const bool inside = iw >= 0 && iw < g.W;
            if constexpr (kFold) {
              if (inside)
                src[iw] += dst[ow];
            } else {
              dst[ow] = inside ? src[iw] : T(0);
            }
          }
        }
      }
}

/// Offset of group `grp` of sample `n` in an [N, channels, plane] tensor.
inline int64_t group_offset(int64_t n, int64_t grp, int64_t channels, int64_t per_group, int64_t plane) {
  return (n * channels + grp * per_group) * plane;
}

/// Weight of group `grp` as an [Og, Cg*kH*kW] matrix (or its transpose).
template <class T> Mat<T> weight_mat(const Geometry &g, const T *w, int64_t grp, bool transposed) {
  const T *base = w + grp * g.Og * g.col_rows();
  if (transposed)
    return {base, g.col_rows(), g.Og, 1, g.col_rows()};
  return {base, g.Og, g.col_rows(), g.col_rows(), 1};
}

template <class T> void forward_kernel(const Geometry &g, const T *x, const T *w, T *y) {
  std::vector<T> cols(static_cast<size_t>(g.col_rows() * g.col_cols()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.p.groups; ++grp) {
      T *xg = const_cast<T *>(x) + group_offset(n, grp, g.C, g.Cg, g.H * g.W);
      unfold<T, false>(g, xg, cols.data());
      Mat<T> cm{cols.data(), g.col_rows(), g.col_cols(), g.col_cols(), 1};
      gemm(weight_mat(g, w, grp, false), cm, y + group_offset(n, grp, g.O, g.Og, g.col_cols()));
    }
}

template <class T> void input_grad_kernel(const Geometry &g, const T *gy, const T *w, T *gx) {
  std::fill(gx, gx + g.N * g.C * g.H * g.W, T(0));
  std::vector<T> cols(static_cast<size_t>(g.col_rows() * g.col_cols()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.p.groups; ++grp) {
      Mat<T> gm{gy + group_offset(n, grp, g.O, g.Og, g.col_cols()), g.Og, g.col_cols(), g.col_cols(), 1};
      gemm(weight_mat(g, w, grp, true), gm, cols.data());
      unfold<T, true>(g, gx + group_offset(n, grp, g.C, g.Cg, g.H * g.W), cols.data());
    }
}

template <class T> void weight_grad_kernel(const Geometry &g, const T *x, const T *gy, T *gw) {
  std::fill(gw, gw + g.O * g.col_rows(), T(0));
  std::vector<T> cols(static_cast<size_t>(g.col_rows() * g.col_cols()));
  std::vector<T> part(static_cast<size_t>(g.Og * g.col_rows()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t grp = 0; grp < g.p.groups; ++grp) {
      T *xg = const_cast<T *>(x) + group_offset(n, grp, g.C, g.Cg, g.H * g.W);
      unfold<T, false>(g, xg, cols.data());
      Mat<T> gm{gy + group_offset(n, grp, g.O, g.Og, g.col_cols()), g.Og, g.col_cols(), g.col_cols(), 1};
      Mat<T> ct{cols.data(), g.col_cols(), g.col_rows(), 1, g.col_cols()};
      gemm(gm, ct, part.data());
      T *dst = gw + grp * g.Og * g.col_rows();
      for (size_t i = 0; i < part.size(); ++i)
        dst[i] += part[i];
    }
}

// ---- argument checks ---------------------------------------------------------------

std::string shape_or_undefined(const Tensor &t) { return t.defined() ? shape_str(t.sizes()) : "undefined"; }

void check_input(const Tensor &x, const char *op) {
  KILN_CHECK(x.defined(), op, ": input is an undefined tensor");
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ",
             shape_str(x.sizes()));
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating point input, got ", dtype_name(x.dtype()));
}

void check_pair(std::array<int64_t, 2> v, int64_t min, const char *op, const char *what) {
  KILN_CHECK(v[0] >= min && v[1] >= min, op, ": ", what, " must be >= ", min, ", got [", v[0], ", ", v[1], "]");
}

void check_weight(const Tensor &x, const Tensor &w, const Tensor &bias, int64_t groups) {
  KILN_CHECK(w.defined() && w.dim() == 4, "conv2d: expected a 4-D weight [C_out, C_in/groups, kH, kW], got ",
             shape_or_undefined(w));
  KILN_CHECK(w.dtype() == x.dtype(), "conv2d: input dtype ", dtype_name(x.dtype()), " and weight dtype ",
             dtype_name(w.dtype()), " differ");
  KILN_CHECK(groups >= 1, "conv2d: groups must be >= 1, got ", groups);
  const int64_t c_in = x.size(-3);
  KILN_CHECK(c_in % groups == 0 && w.size(0) % groups == 0, "conv2d: C_in = ", c_in, " and C_out = ", w.size(0),
             " must both be divisible by groups = ", groups);
  KILN_CHECK(w.size(1) * groups == c_in, "conv2d: weight of shape ", shape_str(w.sizes()), " with groups = ", groups,
             " expects ", w.size(1) * groups, " input channels, got input of shape ", shape_str(x.sizes()));
  KILN_CHECK(w.size(0) > 0 && w.size(2) > 0 && w.size(3) > 0, "conv2d: weight has a zero size: ", shape_str(w.sizes()));
  if (!bias.defined())
    return;
  KILN_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "conv2d: expected bias of shape [", w.size(0), "], got ",
             shape_str(bias.sizes()));
  KILN_CHECK(bias.dtype() == x.dtype(), "conv2d: bias dtype ", dtype_name(bias.dtype()), " differs from input dtype ",
             dtype_name(x.dtype()));
}

/// Checks that the (dilated) kernel fits the padded input along both axes.
void check_output_size(const Shape &x, std::array<int64_t, 2> k, const ConvParams &p, const char *op) {
  for (int axis = 0; axis < 2; ++axis) {
    const int64_t padded = x[x.size() - 2 + axis] + 2 * p.padding[axis];
    const int64_t effective = p.dilation[axis] * (k[axis] - 1) + 1;
    KILN_CHECK(effective <= padded, op, ": kernel size ", effective, " (after dilation) exceeds the padded input size ",
               padded, " along ", axis == 0 ? "H" : "W", " for input of shape ", shape_str(x));
  }
}

/// Runs `f` on a 4-D view of a 3-D (unbatched) or 4-D input.
template <class F> Tensor batched(const Tensor &x, F &&f) {
  if (x.dim() == 4)
    return f(x);
  return f(x.unsqueeze(0)).squeeze(0);
}

bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }

/// The three conv2d primitives.
enum class Cv { Forward, InputGrad, WeightGrad };

/// Forward: out = conv(a = x, b = w); InputGrad: out = conv_input_grad(a = gy,
/// b = w); WeightGrad: out = conv_weight_grad(a = x, b = gy). All contiguous,
/// one float dtype, one device.
using ConvKernel = void(Cv op, const Geometry &g, const Tensor &a, const Tensor &b, const Tensor &out);
dispatch::DispatchStub<ConvKernel> conv_stub("conv2d");

void conv_cpu(Cv op, const Geometry &g, const Tensor &a, const Tensor &b, const Tensor &out) {
  dispatch_float(out.dtype(), "conv2d", [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
    case Cv::Forward: forward_kernel<T>(g, a.data_ptr<T>(), b.data_ptr<T>(), out.data_ptr<T>()); break;
    case Cv::InputGrad: input_grad_kernel<T>(g, a.data_ptr<T>(), b.data_ptr<T>(), out.data_ptr<T>()); break;
    case Cv::WeightGrad: weight_grad_kernel<T>(g, a.data_ptr<T>(), b.data_ptr<T>(), out.data_ptr<T>()); break;
    }
  });
}
const dispatch::KernelRegistrar<ConvKernel> conv_cpu_reg(conv_stub, DeviceType::CPU, conv_cpu);

} // namespace

// ---- conv2d primitives ---------------------------------------------------------------

namespace detail {

Tensor conv2d_forward(const Tensor &x, const Tensor &w, const ConvParams &p) {
  trace::GraphBreak graph_break("conv2d");  // not capturable: runs eagerly between compiled segments
  const Geometry g = geometry(x.sizes(), w.sizes(), p);
  Tensor xc = dense(x), wc = dense(w);
  Tensor out = Tensor::empty({g.N, g.O, g.OH, g.OW}, x.dtype(), x.device());
  conv_stub("conv2d", x.device().type, Cv::Forward, g, xc, wc, out);
  if (autograd::any_requires_grad({x, w})) {
    const bool need_x = x.requires_grad(), need_w = w.requires_grad();
    autograd::record(out, "ConvolutionBackward", {x, w}, {x, w},
                     [p, need_x, need_w](const TensorList &gr, const TensorList &s) -> TensorList {
                       Tensor gx = need_x ? conv2d_input_grad(gr[0], s[1], s[0].sizes(), p) : Tensor();
                       Tensor gw = need_w ? conv2d_weight_grad(s[0], gr[0], s[1].sizes(), p) : Tensor();
                       return {gx, gw};
                     });
  }
  return out;
}

Tensor conv2d_input_grad(const Tensor &gy, const Tensor &w, const Shape &x_shape, const ConvParams &p) {
  trace::GraphBreak graph_break("conv2d_input_grad");  // not capturable: runs eagerly between compiled segments
  const Geometry g = geometry(x_shape, w.sizes(), p);
  Tensor gyc = dense(gy), wc = dense(w);
  Tensor out = Tensor::empty(x_shape, gy.dtype(), gy.device());
  conv_stub("conv2d_input_grad", gy.device().type, Cv::InputGrad, g, gyc, wc, out);
  if (autograd::any_requires_grad({gy, w})) {
    autograd::record(out, "ConvolutionBackwardInputBackward", {gy, w}, {gy, w},
                     [p](const TensorList &gr, const TensorList &s) -> TensorList {
                       return {conv2d_forward(gr[0], s[1], p), conv2d_weight_grad(gr[0], s[0], s[1].sizes(), p)};
                     });
  }
  return out;
}

Tensor conv2d_weight_grad(const Tensor &x, const Tensor &gy, const Shape &w_shape, const ConvParams &p) {
  trace::GraphBreak graph_break("conv2d_weight_grad");  // not capturable: runs eagerly between compiled segments
  const Geometry g = geometry(x.sizes(), w_shape, p);
  Tensor xc = dense(x), gyc = dense(gy);
  Tensor out = Tensor::empty(w_shape, x.dtype(), x.device());
  conv_stub("conv2d_weight_grad", x.device().type, Cv::WeightGrad, g, xc, gyc, out);
  if (autograd::any_requires_grad({x, gy})) {
    autograd::record(out, "ConvolutionBackwardWeightBackward", {x, gy}, {x, gy},
                     [p](const TensorList &gr, const TensorList &s) -> TensorList {
                       return {conv2d_input_grad(s[1], gr[0], s[0].sizes(), p), conv2d_forward(s[0], gr[0], p)};
                     });
  }
  return out;
}

} // namespace detail

namespace functional {

Tensor conv2d(const Tensor &x, const Tensor &weight, const Tensor &bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  amp::detail::AutocastOp ac("conv2d");
  if (ac)
    return conv2d(ac.cast(x), ac.cast(weight), ac.cast(bias), stride, padding, dilation, groups);
  check_input(x, "conv2d");
  check_weight(x, weight, bias, groups);
  dispatch::common_device("conv2d", {&x, &weight, &bias});
  check_pair(stride, 1, "conv2d", "stride");
  check_pair(padding, 0, "conv2d", "padding");
  check_pair(dilation, 1, "conv2d", "dilation");
  const ConvParams p{stride, padding, dilation, groups};
  check_output_size(x.sizes(), {weight.size(2), weight.size(3)}, p, "conv2d");
  const DType compute = is_half(x.dtype()) ? kFloat32 : x.dtype();
  return batched(x, [&](const Tensor &x4) {
    Tensor y = detail::conv2d_forward(x4.to(compute), weight.to(compute), p);
    if (bias.defined())
      y = y + bias.to(compute).reshape({1, weight.size(0), 1, 1});
    return y.to(x.dtype());
  });
}

} // namespace functional

// ---- max pooling -------------------------------------------------------------------------

namespace {

/// Pooling windows: input [N, C, H, W] -> output [N, C, OH, OW].
struct PoolGeometry {
  int64_t planes, H, W, OH, OW;
  std::array<int64_t, 2> k, s, p;
};

/// Max of one window starting at (h0, w0) (may start in the padding) and the
/// in-plane index of its first max; NaN wins, as PyTorch.
template <class T> std::pair<T, int64_t> window_max(const PoolGeometry &g, const T *plane, int64_t h0, int64_t w0) {
  T best = -std::numeric_limits<T>::infinity();
  int64_t arg = -1;
  const int64_t h_end = std::min(h0 + g.k[0], g.H), w_end = std::min(w0 + g.k[1], g.W);
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

template <class T> void max_pool_kernel(const PoolGeometry &g, const T *x, T *y, int64_t *idx) {
  for (int64_t plane = 0; plane < g.planes; ++plane)
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const auto [best, arg] = window_max(g, x + plane * g.H * g.W, oh * g.s[0] - g.p[0], ow * g.s[1] - g.p[1]);
        const int64_t o = (plane * g.OH + oh) * g.OW + ow;
        y[o] = best;
        idx[o] = arg;
      }
}

/// Flattens a 4-D tensor to [planes, elements per plane] metadata.
int64_t plane_count(const Shape &s) { return s[0] * s[1]; }

/// The max-pooling primitives.
enum class Pool { Forward, Scatter, Gather };

/// Forward: out = window maxima of src (g), `indices` their in-plane
/// positions (written). Scatter: out (zeroed, the input's shape) at indices
/// += src. Gather: out = src at indices. [N, C, H, W], contiguous, one device.
using PoolKernel = void(Pool op, const PoolGeometry *g, const Tensor &src, const Tensor &indices, const Tensor &out);
dispatch::DispatchStub<PoolKernel> pool_stub("max_pool2d");

/// Scatter (to_input) or gather between the planes of `big` ([.., H, W]) and `small` at indices.
template <class T> void move_at_indices(const Tensor &big, const Tensor &small, const Tensor &indices, bool to_input) {
  const int64_t planes = plane_count(big.sizes()), in_plane = big.size(2) * big.size(3);
  const int64_t out_plane = indices.size(2) * indices.size(3);
  const int64_t *idx = indices.data_ptr<int64_t>();
  T *b = big.data_ptr<T>(), *s = small.data_ptr<T>();
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t o = 0; o < out_plane; ++o) {
      T &x = b[pl * in_plane + idx[pl * out_plane + o]];
      if (to_input) x += s[pl * out_plane + o];
      else s[pl * out_plane + o] = x;
    }
}

void pool_cpu(Pool op, const PoolGeometry *g, const Tensor &src, const Tensor &indices, const Tensor &out) {
  dispatch_float(out.dtype(), "max_pool2d", [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
    case Pool::Forward: max_pool_kernel<T>(*g, src.data_ptr<T>(), out.data_ptr<T>(), indices.data_ptr<int64_t>()); break;
    case Pool::Scatter: move_at_indices<T>(out, src, indices, /*to_input=*/true); break;
    case Pool::Gather: move_at_indices<T>(src, out, indices, /*to_input=*/false); break;
    }
  });
}
const dispatch::KernelRegistrar<PoolKernel> pool_cpu_reg(pool_stub, DeviceType::CPU, pool_cpu);

void check_pool_args(const Tensor &x, std::array<int64_t, 2> k, std::array<int64_t, 2> s, std::array<int64_t, 2> p,
                     const char *op) {
  check_input(x, op);
  check_pair(k, 1, op, "kernel_size");
  check_pair(s, 1, op, "stride");
  check_pair(p, 0, op, "padding");
  KILN_CHECK(2 * p[0] <= k[0] && 2 * p[1] <= k[1], op, ": padding [", p[0], ", ", p[1],
             "] should be at most half of kernel_size [", k[0], ", ", k[1], "]");
  check_output_size(x.sizes(), k, ConvParams{s, p, {1, 1}, 1}, op);
}

} // namespace

namespace detail {

Tensor max_pool2d_scatter(const Tensor &gy, const Tensor &indices, const Shape &x_shape) {
  trace::GraphBreak graph_break("max_pool2d_backward");  // not capturable: runs eagerly between compiled segments
  Tensor gyc = dense(gy), ic = dense(indices);
  Tensor out = zeros(x_shape, gy.dtype(), gy.device());
  pool_stub("max_pool2d_backward", gy.device().type, Pool::Scatter, nullptr, gyc, ic, out);
  if (autograd::any_requires_grad({gy}))
    autograd::record(
        out, "MaxPool2DBackwardBackward", {gy}, {indices},
        [](const TensorList &gr, const TensorList &s) -> TensorList { return {max_pool2d_gather(gr[0], s[0])}; });
  return out;
}

Tensor max_pool2d_gather(const Tensor &gx, const Tensor &indices) {
  trace::GraphBreak graph_break("max_pool2d_gather");  // not capturable: runs eagerly between compiled segments
  Tensor gxc = dense(gx), ic = dense(indices);
  Tensor out = Tensor::empty(indices.sizes(), gx.dtype(), gx.device());
  pool_stub("max_pool2d_gather", gx.device().type, Pool::Gather, nullptr, gxc, ic, out);
  if (autograd::any_requires_grad({gx})) {
    const Shape x_shape = gx.sizes();
    autograd::record(out, "MaxPool2DGatherBackward", {gx}, {indices},
                     [x_shape](const TensorList &gr, const TensorList &s) -> TensorList {
                       return {max_pool2d_scatter(gr[0], s[0], x_shape)};
                     });
  }
  return out;
}

} // namespace detail

namespace {

/// max_pool2d on a 4-D float32/float64 input (records the scatter backward).
Tensor max_pool2d_forward(const Tensor &x, const PoolGeometry &g) {
  trace::GraphBreak graph_break("max_pool2d");  // not capturable: runs eagerly between compiled segments
  Tensor xc = dense(x);
  Tensor out = Tensor::empty({x.size(0), x.size(1), g.OH, g.OW}, x.dtype(), x.device());
  Tensor indices = Tensor::empty(out.sizes(), kInt64, x.device());
  pool_stub("max_pool2d", x.device().type, Pool::Forward, &g, xc, indices, out);
  if (autograd::any_requires_grad({x})) {
    const Shape x_shape = x.sizes();
    autograd::record(out, "MaxPool2DWithIndicesBackward", {x}, {indices},
                     [x_shape](const TensorList &gr, const TensorList &s) -> TensorList {
                       return {detail::max_pool2d_scatter(gr[0], s[0], x_shape)};
                     });
  }
  return out;
}

} // namespace

namespace functional {

namespace {
std::array<int64_t, 2> default_stride(std::array<int64_t, 2> stride, std::array<int64_t, 2> k) {
  return (stride[0] == 0 && stride[1] == 0) ? k : stride;
}
} // namespace

Tensor max_pool2d(const Tensor &x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  stride = default_stride(stride, kernel_size);
  check_pool_args(x, kernel_size, stride, padding, "max_pool2d");
  const DType compute = is_half(x.dtype()) ? kFloat32 : x.dtype();
  return batched(x, [&](const Tensor &x4) {
    const ConvParams p{stride, padding, {1, 1}, 1};
    const Geometry cg = geometry(x4.sizes(), {1, 1, kernel_size[0], kernel_size[1]}, p);
    const PoolGeometry g{plane_count(x4.sizes()), cg.H, cg.W, cg.OH, cg.OW, kernel_size, stride, padding};
    return max_pool2d_forward(x4.to(compute), g).to(x.dtype());
  });
}

Tensor avg_pool2d(const Tensor &x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  stride = default_stride(stride, kernel_size);
  check_pool_args(x, kernel_size, stride, padding, "avg_pool2d");
  // Not an autocast op (PyTorch runs it in the input dtype): its conv2d must not cast.
  amp::detail::ExcludeGuard no_autocast;
  // With count_include_pad and floor rounding every window holds kH*kW
  // (padded) elements, so the mean is a depthwise convolution with 1/(kH*kW).
  const int64_t channels = x.size(-3);
  const double inv = 1.0 / static_cast<double>(kernel_size[0] * kernel_size[1]);
  Tensor weight = full({channels, 1, kernel_size[0], kernel_size[1]}, inv, x.dtype(), x.device());
  return conv2d(x, weight, Tensor(), stride, padding, {1, 1}, channels);
}

} // namespace functional
} // namespace kiln::nn
