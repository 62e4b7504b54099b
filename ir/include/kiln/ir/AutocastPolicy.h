// kiln/ir/AutocastPolicy.h - which precision each op runs in under autocast.
//
// One table, used by eager autocast (frontend, `kiln::autocast`) and by the
// `kiln-autocast` pass (passes/), so compiled and eager runs cast the same
// ops. Modeled on PyTorch's autocast op lists
// (aten/src/ATen/autocast_mode.cpp, "lower_precision_fp" / "fp32" /
// "promote"; see https://pytorch.org/docs/stable/amp.html#op-specific-behavior).
//
// Keys are op names without a dialect prefix: eager op names ("linear",
// "softmax", ...) and `kiln` dialect op names ("matmul", "reduce_sum", ...).
// Pure header, no MLIR types: frontend code includes it.
#pragma once

#include <string_view>

namespace kiln::ir {

/// What autocast does to an op's floating-point inputs.
enum class CastPolicy {
  LowerPrecision,  ///< cast float inputs to the autocast dtype (f16/bf16): GEMM-like ops
  Float32,         ///< cast float inputs to f32: numerically sensitive ops
  Promote,         ///< mixed float inputs: cast all to the widest one
  None,            ///< run in whatever dtype the inputs have
};

/// The policy of a `kiln` dialect op by mnemonic ("matmul", "reduce_sum"):
/// the autocast column of Ops.def. Unknown names get CastPolicy::None.
constexpr CastPolicy dialectAutocastPolicy(std::string_view mnemonic) {
#define KILN_OP(Kind, OpClass, name, operands, category, flops, autocast, build)                                  \
  if (mnemonic == name) return CastPolicy::autocast;
#include "kiln/ir/Ops.def"
  return CastPolicy::None;
}

/// The policy for `op`: an eager op name ("linear", "softmax", "exp") or a
/// dialect op mnemonic ("matmul", "reduce_sum"). Eager ops whose name is a
/// dialect mnemonic (add, exp, matmul, ...) share that op's row of Ops.def;
/// the lists below hold the eager-only names. Unknown names get
/// CastPolicy::None.
constexpr CastPolicy autocastPolicy(std::string_view op) {
  // lower_precision_fp: matrix products and convolutions.
  for (std::string_view n : {"mm", "bmm", "addmm", "baddbmm", "linear", "conv1d", "conv2d", "conv3d",
                             "scaled_dot_product_attention", "multi_head_attention"})
    if (op == n) return CastPolicy::LowerPrecision;
  // fp32: reductions, exponentials, norms and losses.
  for (std::string_view n : {"softmax", "log_softmax", "layer_norm", "batch_norm", "group_norm", "sum", "mean",
                             "var", "std", "cumsum", "logsumexp", "norm", "cross_entropy", "nll_loss", "mse_loss",
                             "binary_cross_entropy_with_logits"})
    if (op == n) return CastPolicy::Float32;
  // promote: ops combining several tensors.
  for (std::string_view n : {"where", "cat", "stack", "masked_fill"})
    if (op == n) return CastPolicy::Promote;
  return dialectAutocastPolicy(op);
}

}  // namespace kiln::ir
