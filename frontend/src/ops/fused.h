// fused.h (internal) - fused eager kernels for ops that the public API
// composes from primitives (softmax, log_softmax, layer_norm, gelu "tanh").
//
// The composites stay the definition: kiln::compile traces them op by op
// (frontend/src/trace.h), and the compiled graphs, their kernels and their
// numbers depend on that. Outside a trace, the composite's many passes over
// memory and its temporaries dominate eager time (issue 13, point 7), so the
// public op calls one fused kernel here instead, with its own autograd node
// whose backward is one fused kernel too (as PyTorch's
// aten/src/ATen/native/cpu/SoftMaxKernel.cpp, layer_norm_kernel.cpp and
// Activation.cpp). Every entry point checks applies() first:
//
//   if (fused::applies(x)) return fused::softmax(x, dim, /*log=*/false);
//   ... the composite ...
//
// A backward that runs while a trace is active (kiln::compile traces the
// eager backward) computes the same formula from primitive ops, so it is
// recorded like any other backward formula.
#pragma once

#include <cstdint>

#include "kiln/tensor.h"

namespace kiln::fused {

/// True when the fused kernel may replace the composite for `x`: fused
/// kernels are enabled (set_enabled; the environment variable
/// KILN_EAGER_FUSED=0 turns them off at start-up), no trace is active, `x`
/// is float32 or float64 (float16/bfloat16 keep the composite, which rounds
/// each step to the input dtype as before), and `x`'s device has the CPU
/// kernels (the cpu, or a host-accessible device, dispatch.h).
bool applies(const Tensor &x);

/// Turns the fused kernels on or off for the whole process (tests compare
/// the two paths; benchmarks measure before/after in one binary).
void set_enabled(bool on);
/// Whether the fused kernels are on (default: on unless KILN_EAGER_FUSED=0).
bool enabled();

/// softmax (log = false) or log_softmax (log = true) of `x` over `dim`
/// (negative counts from the end), same shape and dtype as `x`. Row
/// kernel: one pass for the max, one for the sum of exp(x - max), one to
/// write; OpenMP over rows. Backward: softmax g -> y * (g - sum(g * y)),
/// log_softmax g -> g - exp(y) * sum(g) (PyTorch's SoftMaxKernel.cpp).
/// Call only when applies(x); `dim` must be valid for `x`.
Tensor softmax(const Tensor &x, int64_t dim, bool log);

/// layer_norm over the last `k` dims of `x` (float32/float64), each row of
/// n = their element count normalized on its own: y = (x - mean) * rstd *
/// weight + bias with the biased variance, rstd = 1 / sqrt(var + eps);
/// weight and bias optional (undefined), else n elements in x's dtype (any
/// shape with that count, e.g. normalized_shape). Backward (PyTorch's
/// layer_norm_backward_cpu): dx = rstd * (g w - mean(g w) - xhat * mean(g w
/// xhat)), dweight = sum over rows of g xhat, dbias = sum of g, with chunk
/// partial sums combined in a fixed order (deterministic). Call only when
/// applies(x), 1 <= k <= x.dim(), and the defined affine tensors have x's dtype.
Tensor layer_norm(const Tensor &x, int64_t k, const Tensor &weight, const Tensor &bias, double eps);

/// gelu with approximate = "tanh": x * sigmoid(2 u), u = sqrt(2 / pi) (x +
/// 0.044715 x^3) (== 0.5 x (1 + tanh(u)), the composite's formula, with
/// sigmoid from exp(-|2u|) so neither branch overflows). Backward:
/// s + x s (1 - s) 2 u'(x). Call only when applies(x).
Tensor gelu_tanh(const Tensor &x);

}  // namespace kiln::fused
