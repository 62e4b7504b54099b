// kiln/functional.h - torch.nn.functional: layers and losses as functions.
//
// Shapes use N = batch, C = channels/classes, H/W = spatial, L/S = sequence.
// All functions are differentiable in their float inputs and throw
// kiln::Error naming the function and the bad shape/dtype/value.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kiln/ops.h"

namespace kiln::nn::functional {

/// How a loss reduces over the batch.
enum class Reduction { None, Mean, Sum };

// ---- linear and activations (frontend/src/nn/functional.cpp) --------------------------
/// x W^T + b; x [N, in] (or [..., in]), W [out, in], b [out] (optional) -> [N, out].
Tensor linear(const Tensor &x, const Tensor &weight, const Tensor &bias = Tensor());
/// exp(x - logsumexp(x)) along dim; any shape.
Tensor softmax(const Tensor &x, int64_t dim);
/// log(softmax(x)) along `dim`, computed as x - max - log(sum(exp(x - max))).
Tensor log_softmax(const Tensor &x, int64_t dim);

// ---- losses (frontend/src/nn/losses.cpp) ----------------------------------------------
/// Negative log-likelihood. log_probs [N, C] float, target [N] int64 in [0, C)
/// or ignore_index (those rows count neither in the sum nor the mean's
/// denominator). Throws on shape/dtype mismatch or an out-of-range class.
Tensor nll_loss(const Tensor &log_probs, const Tensor &target, Reduction reduction = Reduction::Mean,
                int64_t ignore_index = -100);
/// nll_loss(log_softmax(logits, 1), target) with optional label smoothing
/// eps: loss = (1 - eps) * nll + eps * mean_c(-log_softmax) (Szegedy et al.
/// 2016; PyTorch's formula). logits [N, C], target [N] int64.
Tensor cross_entropy(const Tensor &logits, const Tensor &target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);
/// (input - target)^2, reduced (Mean over all elements). Float input and
/// target of the same shape (no broadcasting); throws otherwise.
Tensor mse_loss(const Tensor &input, const Tensor &target, Reduction reduction = Reduction::Mean);
/// -[pos_weight * t * log(sigmoid(x)) + (1 - t) * log(1 - sigmoid(x))],
/// computed stably as PyTorch (aten Loss.cpp): (1 - t) x + (1 + (pw - 1) t)
/// (m + log(exp(-m) + exp(-x - m))), m = max(-x, 0). input/target float, same
/// shape [N, *]; pos_weight optional, must broadcast to the input (e.g. [C]);
/// it is differentiable here (PyTorch refuses its gradient).
Tensor binary_cross_entropy_with_logits(const Tensor &input, const Tensor &target,
                                        Reduction reduction = Reduction::Mean, const Tensor &pos_weight = Tensor());

// ---- embedding and dropout (frontend/src/nn/functional_misc.cpp) ----------------------
/// weight[input]: input int64 (or int32) any shape [*], weight [V, D] ->
/// [*, D] (index_select of rows; repeated rows' gradients add). Throws
/// naming the index on one outside [0, V).
Tensor embedding(const Tensor &input, const Tensor &weight);
/// Zeroes elements with probability p and scales the rest by 1/(1-p) when
/// training (Srivastava et al. 2014). The mask comes from Philox at the
/// default generator's (seed, offset), so re-drawing at the same offset gives
/// the same mask (checkpoint relies on it). Exactly: element i (row-major)
/// takes 32-bit word i % 4 of Generator::philox(counter {lo, hi of
/// offset + i / 4, 0, 0}, key {lo, hi of seed}) (= next4() at that offset),
/// u = (word >> 8) * 2^-24, and is kept iff u < 1 - p; the generator's offset
/// then advances by ceil(numel / 4) blocks. Float input only (float16/bfloat16
/// are scaled in float32). Identity (no draw) when !training or p == 0; zeros
/// when p == 1. Throws unless 0 <= p <= 1. Not capturable by kiln::compile.
Tensor dropout(const Tensor &x, double p = 0.5, bool training = true);

// ---- normalization (frontend/src/nn/normalization.cpp) ---------------------------------
/// Layer norm over the last normalized_shape.size() dims (Ba et al. 2016):
/// (x - mean) / sqrt(var + eps) * weight + bias, biased variance. x [*, D...]
/// float (float16/bfloat16 computed in float32); weight/bias optional, shape
/// normalized_shape. A composite of mean/sub/mul/sqrt/div (no own backward).
/// Throws if x does not end in normalized_shape (or it is empty), on a
/// weight/bias shape mismatch or eps < 0.
Tensor layer_norm(const Tensor &x, const Shape &normalized_shape, const Tensor &weight = Tensor(),
                  const Tensor &bias = Tensor(), double eps = 1e-5);
/// Batch norm (Ioffe & Szegedy 2015) over [N, C] or [N, C, *]. training:
/// normalize with batch statistics and update running_mean/running_var in
/// place (running = (1 - momentum) * running + momentum * batch, unbiased
/// batch variance for running_var); eval: use the running statistics.
/// Statistics over all dims but 1 (biased variance for normalizing); the
/// in-place update runs under NoGradGuard (so it is not captured by
/// kiln::compile), running stats may be undefined when training. A composite
/// of differentiable ops. Throws on rank < 2, a per-channel tensor not of
/// shape [C], missing running stats in eval, or one value per channel when
/// training (as PyTorch).
Tensor batch_norm(const Tensor &x, const Tensor &running_mean, const Tensor &running_var,
                  const Tensor &weight = Tensor(), const Tensor &bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

// ---- convolution and pooling (frontend/src/nn/conv.cpp) --------------------------------
/// 2-D cross-correlation: x [N, C_in, H, W], weight [C_out, C_in/groups, kH, kW],
/// bias [C_out] -> [N, C_out, H_out, W_out] with
/// H_out = (H + 2 pad - dilation (kH - 1) - 1) / stride + 1. An unbatched
/// x [C_in, H, W] gives [C_out, H_out, W_out]. x, weight, bias share one float
/// dtype (float16/bfloat16 computed in float32). im2col + GEMM (oneDNN sgemm
/// for float32, a loop for float64); its backward formulas are differentiable
/// primitives again (transposed convolution for the input). Not capturable by
/// kiln::compile yet. Throws on ranks, channel/group mismatches, stride or
/// dilation < 1, padding < 0, or a kernel larger than the padded input.
Tensor conv2d(const Tensor &x, const Tensor &weight, const Tensor &bias = Tensor(), std::array<int64_t, 2> stride = {1, 1},
              std::array<int64_t, 2> padding = {0, 0}, std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
/// Max over kernel windows: [N, C, H, W] -> [N, C, H_out, W_out]; stride
/// defaults to the kernel size (stride {0, 0} means "kernel"); padding is -inf.
/// Floor rounding (ceil_mode = false); 3-D [C, H, W] inputs allowed. The
/// gradient goes to the first max of each window (NaN wins, as PyTorch).
/// Throws on padding > kernel_size / 2 (as PyTorch), kernel_size or stride
/// < 1, or a window larger than the padded input.
Tensor max_pool2d(const Tensor &x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0});
/// Mean over kernel windows (zero padding counted, as count_include_pad=True).
/// Same shapes, defaults and errors as max_pool2d; computed as a depthwise
/// conv2d with weights 1/(kH kW) (its backward is differentiable too).
Tensor avg_pool2d(const Tensor &x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0});

// ---- attention (frontend/src/nn/attention.cpp) ------------------------------------------
/// softmax(q k^T / sqrt(E) + mask) v (Vaswani et al. 2017). q [N, ..., L, E],
/// k [N, ..., S, E], v [N, ..., S, Ev] -> [N, ..., L, Ev]. attn_mask: bool
/// (true = attend) or float (added), broadcastable to [N, ..., L, S];
/// is_causal masks j > i. dropout_p applies dropout to the attention weights.
/// Scale 1/sqrt(E). The "math" path of PyTorch 2.x as a composite: bmm over
/// the flattened leading dims, where/add for the mask, softmax, dropout
/// (training = true). A fully masked row gives NaN (as PyTorch). Throws on
/// mismatched batch dims, E or S, dtypes, a mask that does not broadcast or
/// is neither bool nor float, dropout_p outside [0, 1], or attn_mask
/// together with is_causal (as PyTorch).
Tensor scaled_dot_product_attention(const Tensor &q, const Tensor &k, const Tensor &v,
                                    const Tensor &attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false);

}  // namespace kiln::nn::functional
