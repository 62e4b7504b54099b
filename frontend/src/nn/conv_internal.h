// nn/conv_internal.h (internal) - the conv2d / max_pool2d primitives of
// conv.cpp that autograd formulas, the graph-break replay
// (compile/replay.cpp) and the tests call directly. Each records its kiln
// dialect op (Ops.def) while tracing and is differentiable in turn:
//   conv2d_forward     y  = conv(x, w)               kiln.conv2d
//   conv2d_input_grad  gx = conv_input_grad(gy, w)   kiln.conv2d_input_grad
//   conv2d_weight_grad gw = conv_weight_grad(x, gy)  kiln.conv2d_weight_grad
//   max_pool2d_scatter gx = scatter-add of gy        kiln.max_pool2d_backward
//   max_pool2d_gather  the adjoint of the scatter    kiln.max_pool2d_gather
// Inputs are 4-D [N, C, H, W], one float dtype (float32 or float64; the
// pools also float32/float64 only), on one device; callers check shapes.
#pragma once

#include <array>
#include <cstdint>

#include "kiln/tensor.h"

namespace kiln::nn::detail {

/// PyTorch's conv2d arguments (the layout of runtime::Conv2dParams).
struct ConvParams {
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
};

/// Max pooling windows (PyTorch's max_pool2d, dilation 1, floor rounding).
struct PoolParams {
  std::array<int64_t, 2> kernel, stride, padding;
};

Tensor conv2d_forward(const Tensor &x, const Tensor &w, const ConvParams &p);
/// gy [N, O, OH, OW], w -> [x_shape].
Tensor conv2d_input_grad(const Tensor &gy, const Tensor &w, const Shape &x_shape, const ConvParams &p);
/// x, gy -> [w_shape].
Tensor conv2d_weight_grad(const Tensor &x, const Tensor &gy, const Shape &w_shape, const ConvParams &p);
/// The window maxima of x [N, C, H, W] (records the scatter backward).
Tensor max_pool2d_values(const Tensor &x, const PoolParams &p);
/// Their in-plane positions h * W + w (int64, [N, C, OH, OW]); no autograd.
Tensor max_pool2d_indices(const Tensor &x, const PoolParams &p);
Tensor max_pool2d_scatter(const Tensor &gy, const Tensor &indices, const Shape &x_shape);
Tensor max_pool2d_gather(const Tensor &gx, const Tensor &indices);

} // namespace kiln::nn::detail
