// Convolution and pooling: conv2d and max_pool2d run the kernels of
// runtime/include/kiln/runtime/Conv.h (oneDNN convolution primitives for
// float32, loops for float64 and the pools), the same ones a compiled
// graph's conv and pool steps call; avg_pool2d is a composite (a depthwise
// conv2d with constant weights).
//
// conv2d is three primitives that are each other's gradients, so every
// backward formula is itself differentiable (y = B(x, w) is bilinear):
//   forward       y  = conv(x, w)
//   input grad    gx = conv_input_grad(gy, w)   (a transposed convolution)
//   weight grad   gw = conv_weight_grad(x, gy)
// max_pool2d's backward is likewise a scatter whose gradient is a gather.
// float16 and bfloat16 are computed in float32. Each primitive records its
// kiln dialect op while tracing (nn/conv_internal.h), so kiln::compile
// captures CNNs without graph breaks.
#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/runtime/Conv.h"
#include "nn/conv_internal.h"
#include "ops/dispatch.h"
#include "ops/kernels.h"
#include "trace.h"
#include "amp/autocast.h"

namespace kiln::nn {
namespace {

using autograd::TensorList;
using detail::ConvParams;
using detail::PoolParams;

/// The output size of one spatial axis.
int64_t window_count(int64_t in, int64_t k, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
}

/// The output shape [N, O, OH, OW] of a convolution of x with w.
Shape conv_output_shape(const Shape &x, const Shape &w, const ConvParams &p) {
  return {x[0], w[0], window_count(x[2], w[2], p.stride[0], p.padding[0], p.dilation[0]),
          window_count(x[3], w[3], p.stride[1], p.padding[1], p.dilation[1])};
}

/// A contiguous tensor with the data of `t` and no autograd history (while
/// a lazy trace runs, `t` itself: nothing is computed).
Tensor dense(const Tensor &t) {
  if (t.is_contiguous() || trace::skip_compute())
    return t.detach();
  Tensor c = Tensor::empty(t.sizes(), t.dtype(), t.device());
  kernels::copy_into_contiguous(t, c);
  return c;
}

std::array<int64_t, 4> dims4(const Shape &s) { return {s[0], s[1], s[2], s[3]}; }

runtime::Conv2dParams runtime_params(const ConvParams &p) {
  runtime::Conv2dParams r;
  r.stride = p.stride;
  r.padding = p.padding;
  r.dilation = p.dilation;
  r.groups = p.groups;
  return r;
}

/// Node::ints of a conv op (Ops.def): stride, padding, dilation, groups.
trace::Attrs conv_attrs(const ConvParams &p) {
  return trace::Attrs{{p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], p.groups}};
}

/// Node::ints of a max pool op (Ops.def): kernel, stride, padding.
trace::Attrs pool_attrs(const PoolParams &p) {
  return trace::Attrs{{p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1]}};
}

/// One conv primitive: out = op(a, b) on contiguous tensors of one dtype.
using ConvKernel = void(runtime::ConvOp op, const ConvParams &p, const runtime::ConvShape &s, const Tensor &a,
                        const Tensor &b, const Tensor &out);
dispatch::DispatchStub<ConvKernel> conv_stub("conv2d");

void conv_cpu(runtime::ConvOp op, const ConvParams &p, const runtime::ConvShape &s, const Tensor &a, const Tensor &b,
              const Tensor &out) {
  runtime::conv2d(op, runtime_params(p), s, out.dtype(), a.raw_data(), b.raw_data(), out.raw_data());
}
const dispatch::KernelRegistrar<ConvKernel> conv_cpu_reg(conv_stub, DeviceType::CPU, conv_cpu);

/// CUDA: the backend's convolution (cuDNN on a GPU; the simulator runs the CPU's).
void conv_cuda(runtime::ConvOp op, const ConvParams &p, const runtime::ConvShape &, const Tensor &a, const Tensor &b,
               const Tensor &out) {
  dispatch::on_backend("conv2d", out.device(), [&](runtime::DeviceBackend &backend, runtime::Stream &stream) {
    backend.conv2d(op, runtime_params(p), dispatch::view_of(a), dispatch::view_of(b), dispatch::view_of(out), stream);
  });
}
const dispatch::KernelRegistrar<ConvKernel> conv_cuda_reg(conv_stub, DeviceType::CUDA, conv_cuda);

/// Runs (unless a lazy trace skips compute) and records one conv primitive.
Tensor run_conv(runtime::ConvOp op, ir::OpKind kind, const char *name, const ConvParams &p, const Tensor &a,
                const Tensor &b, const runtime::ConvShape &s) {
  const std::array<int64_t, 4> &r = op == runtime::ConvOp::Forward   ? s.output
                                    : op == runtime::ConvOp::InputGrad ? s.input
                                                                       : s.weight;
  Tensor out = Tensor::empty({r[0], r[1], r[2], r[3]}, a.dtype(), a.device());
  if (!trace::skip_compute())
    conv_stub(name, a.device().type, op, p, s, dense(a), dense(b), out);
  trace::record(kind, {a, b}, out, conv_attrs(p));
  return out;
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

} // namespace

// ---- conv2d primitives ---------------------------------------------------------------

namespace detail {

Tensor conv2d_forward(const Tensor &x, const Tensor &w, const ConvParams &p) {
  const runtime::ConvShape s{dims4(x.sizes()), dims4(w.sizes()), dims4(conv_output_shape(x.sizes(), w.sizes(), p))};
  Tensor out = run_conv(runtime::ConvOp::Forward, ir::OpKind::Conv2d, "conv2d", p, x, w, s);
  if (autograd::any_requires_grad({x, w})) {
    const bool need_x = x.requires_grad(), need_w = w.requires_grad();
    autograd::record(out, "ConvolutionBackward", {x, w}, {x, w},
                     [p, need_x, need_w](const TensorList &gr, const TensorList &sv) -> TensorList {
                       Tensor gx = need_x ? conv2d_input_grad(gr[0], sv[1], sv[0].sizes(), p) : Tensor();
                       Tensor gw = need_w ? conv2d_weight_grad(sv[0], gr[0], sv[1].sizes(), p) : Tensor();
                       return {gx, gw};
                     });
  }
  return out;
}

Tensor conv2d_input_grad(const Tensor &gy, const Tensor &w, const Shape &x_shape, const ConvParams &p) {
  const runtime::ConvShape s{dims4(x_shape), dims4(w.sizes()), dims4(gy.sizes())};
  Tensor out = run_conv(runtime::ConvOp::InputGrad, ir::OpKind::Conv2dInputGrad, "conv2d_input_grad", p, gy, w, s);
  if (autograd::any_requires_grad({gy, w})) {
    autograd::record(out, "ConvolutionBackwardInputBackward", {gy, w}, {gy, w},
                     [p](const TensorList &gr, const TensorList &sv) -> TensorList {
                       return {conv2d_forward(gr[0], sv[1], p), conv2d_weight_grad(gr[0], sv[0], sv[1].sizes(), p)};
                     });
  }
  return out;
}

Tensor conv2d_weight_grad(const Tensor &x, const Tensor &gy, const Shape &w_shape, const ConvParams &p) {
  const runtime::ConvShape s{dims4(x.sizes()), dims4(w_shape), dims4(gy.sizes())};
  Tensor out = run_conv(runtime::ConvOp::WeightGrad, ir::OpKind::Conv2dWeightGrad, "conv2d_weight_grad", p, x, gy, s);
  if (autograd::any_requires_grad({x, gy})) {
    autograd::record(out, "ConvolutionBackwardWeightBackward", {x, gy}, {x, gy},
                     [p](const TensorList &gr, const TensorList &sv) -> TensorList {
                       return {conv2d_input_grad(sv[1], gr[0], sv[0].sizes(), p), conv2d_forward(sv[0], gr[0], p)};
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

/// One max pooling primitive (runtime::max_pool2d; see MaxPoolOp) on
/// contiguous tensors: `planes` [N, C, H, W], `windows` [N, C, OH, OW].
using PoolKernel = void(runtime::MaxPoolOp op, const PoolParams &p, const Shape &planes, const Shape &windows,
                        const Tensor &src, const Tensor &indices, const Tensor &values);
dispatch::DispatchStub<PoolKernel> pool_stub("max_pool2d");

runtime::Pool2dParams runtime_pool_params(const PoolParams &p) {
  runtime::Pool2dParams rp;
  rp.kernel = p.kernel;
  rp.stride = p.stride;
  rp.padding = p.padding;
  return rp;
}

void pool_cpu(runtime::MaxPoolOp op, const PoolParams &p, const Shape &planes, const Shape &windows, const Tensor &src,
              const Tensor &indices, const Tensor &values) {
  const runtime::Pool2dParams rp = runtime_pool_params(p);
  const DType dtype = op == runtime::MaxPoolOp::Backward ? values.dtype() : src.dtype();
  runtime::max_pool2d(op, rp, dims4(planes), dims4(windows), dtype, src.raw_data(),
                      values.defined() ? values.raw_data() : nullptr,
                      indices.defined() ? indices.data_ptr<int64_t>() : nullptr);
}
const dispatch::KernelRegistrar<PoolKernel> pool_cpu_reg(pool_stub, DeviceType::CPU, pool_cpu);

/// CUDA: the backend's max pooling (the simulator runs the CPU's).
void pool_cuda(runtime::MaxPoolOp op, const PoolParams &p, const Shape &, const Shape &, const Tensor &src,
               const Tensor &indices, const Tensor &values) {
  const runtime::Pool2dParams rp = runtime_pool_params(p);
  dispatch::on_backend("max_pool2d", src.device(), [&](runtime::DeviceBackend &backend, runtime::Stream &stream) {
    backend.max_pool2d(op, rp, dispatch::view_of(src), dispatch::view_of(indices), dispatch::view_of(values), stream);
  });
}
const dispatch::KernelRegistrar<PoolKernel> pool_cuda_reg(pool_stub, DeviceType::CUDA, pool_cuda);

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

Shape pool_output_shape(const Shape &x, const PoolParams &p) {
  return {x[0], x[1], window_count(x[2], p.kernel[0], p.stride[0], p.padding[0], 1),
          window_count(x[3], p.kernel[1], p.stride[1], p.padding[1], 1)};
}

/// The windows of x: values (float, x's dtype) or indices (int64).
Tensor pool_windows(const Tensor &x, const PoolParams &p, bool indices) {
  const Shape windows = pool_output_shape(x.sizes(), p);
  Tensor out = Tensor::empty(windows, indices ? kInt64 : x.dtype(), x.device());
  if (!trace::skip_compute())
    pool_stub("max_pool2d", x.device().type, runtime::MaxPoolOp::Forward, p, x.sizes(), windows, dense(x),
              indices ? out : Tensor(), indices ? Tensor() : out);
  trace::record(indices ? ir::OpKind::MaxPool2dIndices : ir::OpKind::MaxPool2d, {x}, out, pool_attrs(p));
  return out;
}

} // namespace

namespace detail {

Tensor max_pool2d_values(const Tensor &x, const PoolParams &p) {
  Tensor out = pool_windows(x, p, /*indices=*/false);
  if (autograd::any_requires_grad({x})) {
    Tensor indices = max_pool2d_indices(x, p);
    const Shape x_shape = x.sizes();
    autograd::record(out, "MaxPool2DWithIndicesBackward", {x}, {indices},
                     [x_shape](const TensorList &gr, const TensorList &s) -> TensorList {
                       return {max_pool2d_scatter(gr[0], s[0], x_shape)};
                     });
  }
  return out;
}

Tensor max_pool2d_indices(const Tensor &x, const PoolParams &p) {
  NoGradGuard no_grad;
  return pool_windows(x, p, /*indices=*/true);
}

Tensor max_pool2d_scatter(const Tensor &gy, const Tensor &indices, const Shape &x_shape) {
  Tensor out = Tensor::empty(x_shape, gy.dtype(), gy.device());
  if (!trace::skip_compute())
    pool_stub("max_pool2d_backward", gy.device().type, runtime::MaxPoolOp::Backward, PoolParams{}, x_shape,
              gy.sizes(), dense(gy), dense(indices), out);
  trace::record(ir::OpKind::MaxPool2dBackward, {gy, indices}, out);
  if (autograd::any_requires_grad({gy}))
    autograd::record(
        out, "MaxPool2DBackwardBackward", {gy}, {indices},
        [](const TensorList &gr, const TensorList &s) -> TensorList { return {max_pool2d_gather(gr[0], s[0])}; });
  return out;
}

Tensor max_pool2d_gather(const Tensor &gx, const Tensor &indices) {
  Tensor out = Tensor::empty(indices.sizes(), gx.dtype(), gx.device());
  if (!trace::skip_compute())
    pool_stub("max_pool2d_gather", gx.device().type, runtime::MaxPoolOp::Gather, PoolParams{}, gx.sizes(),
              indices.sizes(), dense(gx), dense(indices), out);
  trace::record(ir::OpKind::MaxPool2dGather, {gx, indices}, out);
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
  const PoolParams p{kernel_size, stride, padding};
  return batched(x, [&](const Tensor &x4) { return detail::max_pool2d_values(x4.to(compute), p).to(x.dtype()); });
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
