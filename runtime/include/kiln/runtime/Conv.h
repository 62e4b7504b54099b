// kiln/runtime/Conv.h - 2-D convolution and max pooling on the CPU: the one
// implementation that eager conv2d / max_pool2d (frontend/src/nn/conv.cpp)
// and compiled executables (LaunchKind::Conv / MaxPool, through
// DeviceBackend::conv2d / max_pool2d) both call.
//
//   runtime::ConvShape s{{2, 3, 8, 8}, {4, 3, 3, 3}, {2, 4, 8, 8}};
//   runtime::Conv2dParams p;  p.padding = {1, 1};
//   runtime::conv2d(runtime::ConvOp::Forward, p, s, DType::Float32, x, w, y);
#pragma once

#include <array>
#include <cstdint>

#include "kiln/runtime/DType.h"

namespace kiln::runtime {

/// The attributes of a 2-D convolution (PyTorch's conv2d arguments).
struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

/// The three convolution primitives (PyTorch's convolution and its
/// convolution_backward split into the input and the weight gradient).
enum class ConvOp : int8_t {
  Forward,    ///< out = y [N, O, OH, OW] from a = x, b = w
  InputGrad,  ///< out = grad x [N, C, H, W] from a = grad y, b = w (a transposed convolution)
  WeightGrad, ///< out = grad w [O, C/groups, kH, kW] from a = x, b = grad y
};

/// The sizes of one convolution: input x [N, C, H, W], weight w
/// [O, C / groups, kH, kW], output y [N, O, OH, OW] with
/// OH = (H + 2 * padding[0] - dilation[0] * (kH - 1) - 1) / stride[0] + 1.
struct ConvShape {
  std::array<int64_t, 4> input, weight, output;
};

/// One convolution primitive on contiguous row-major tensors of one dtype
/// (`a`, `b` read, `out` overwritten; see ConvOp for which is which).
///  - Float32: oneDNN 2.6 convolution primitives (forward_training,
///    backward_data, backward_weights; plain nchw / (g)oihw layouts), one
///    per (op, shape, params) in a process-wide cache (cleared at 256
///    entries) so repeated shapes skip primitive creation. Thread-safe.
///    Where oneDNN runs the plain-layout forward as im2col + sgemm
///    ("gemm:jit"), the forward runs on the layouts oneDNN picks instead
///    (brgconv / jit direct), operands and result reordered per call: no
///    process-wide sgemm JIT on the first call (37-45 ms), and 1.5-3x less
///    time per inference forward (bench/README.md, "Exported model").
///    Forwards under 2^21 multiply-adds run on the calling thread.
///  - Float64: im2col and a plain GEMM loop (oneDNN has no f64 convolution).
///  - BFloat16, Float16: widened to float32 (exact), computed as Float32,
///    the result rounded once to nearest even (PyTorch's CPU result for
///    16-bit convolutions computed in float32).
/// Throws std::runtime_error naming the shapes for another dtype, a shape
/// inconsistent with `p` (checked by callers), or a oneDNN failure.
void conv2d(ConvOp op, const Conv2dParams &p, const ConvShape &shape, DType dtype, const void *a, const void *b,
            void *out);

/// The attributes of max pooling (PyTorch's max_pool2d with dilation 1 and
/// ceil_mode false): padding is at most half the kernel.
struct Pool2dParams {
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, padding{0, 0};
};

/// The max pooling primitives.
enum class MaxPoolOp : int8_t {
  Forward,  ///< values and/or indices [N, C, OH, OW] of the window maxima of x [N, C, H, W]
  Backward, ///< grad x [N, C, H, W] = 0, then grad x[plane][indices] += grad y (scatter-add)
  Gather,   ///< out [N, C, OH, OW] = a [N, C, H, W] at indices (the adjoint of Backward)
};

/// Max pooling over contiguous row-major planes: `input` [N, C, H, W] and
/// `output` [N, C, OH, OW] with OH = (H + 2 * padding[0] - kernel[0]) /
/// stride[0] + 1. Indices are in-plane flat positions h * W + w (int64) of
/// the first maximum of each window, or of its last NaN (as PyTorch's
/// max_pool2d_with_indices; padding never wins).
///  - Forward: reads `x` ([N, C, H, W]); writes `values` and `indices`
///    (either may be null).
///  - Backward: reads `x` = grad y ([N, C, OH, OW]) and `indices`; writes
///    `values` = grad x ([N, C, H, W]).
///  - Gather: reads `x` ([N, C, H, W]) and `indices`; writes `values`
///    ([N, C, OH, OW]).
/// dtype Float32, Float64, BFloat16 or Float16 (16-bit through float32:
/// widened, pooled, rounded once to nearest even);
/// throws std::runtime_error otherwise. A plain loop (oneDNN's max pooling
/// keeps its own workspace, not PyTorch's indices).
void max_pool2d(MaxPoolOp op, const Pool2dParams &p, const std::array<int64_t, 4> &input,
                const std::array<int64_t, 4> &output, DType dtype, const void *x, void *values, int64_t *indices);

} // namespace kiln::runtime
