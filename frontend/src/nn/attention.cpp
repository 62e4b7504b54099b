// scaled_dot_product_attention as a composite (the "math" reference path of
// PyTorch 2.x): softmax(q k^T / sqrt(E) + mask) v, built from bmm, where,
// add, softmax and dropout, so autograd needs no formula of its own.
// Leading dims [N, ...] are flattened into one batch dim for kiln::bmm.
#include <cmath>
#include <limits>
#include <string>

#include "kiln/functional.h"
#include "../amp/autocast.h"

namespace kiln::nn::functional {
namespace {

std::string shape_or_undefined(const Tensor &t) { return t.defined() ? shape_str(t.sizes()) : "undefined"; }

void check_operand(const Tensor &t, const char *what) {
  KILN_CHECK(t.defined() && t.dim() >= 2, "scaled_dot_product_attention: expected ", what,
             " of shape [N, ..., L, E] (at least 2-D), got ", shape_or_undefined(t));
  KILN_CHECK(t.is_floating_point(), "scaled_dot_product_attention: expected a floating point ", what, ", got ",
             dtype_name(t.dtype()));
}

void check_operands(const Tensor &q, const Tensor &k, const Tensor &v) {
  check_operand(q, "query");
  check_operand(k, "key");
  check_operand(v, "value");
  KILN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(),
             "scaled_dot_product_attention: query, key and value must have one dtype, got ", dtype_name(q.dtype()),
             ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  const Shape batch(q.sizes().begin(), q.sizes().end() - 2);
  KILN_CHECK(k.dim() == q.dim() && v.dim() == q.dim() && Shape(k.sizes().begin(), k.sizes().end() - 2) == batch &&
                 Shape(v.sizes().begin(), v.sizes().end() - 2) == batch,
             "scaled_dot_product_attention: query ", shape_str(q.sizes()), ", key ", shape_str(k.sizes()),
             " and value ", shape_str(v.sizes()), " must share the leading (batch) dims");
  KILN_CHECK(k.size(-1) == q.size(-1), "scaled_dot_product_attention: key embedding size ", k.size(-1),
             " differs from query embedding size ", q.size(-1));
  KILN_CHECK(v.size(-2) == k.size(-2), "scaled_dot_product_attention: value sequence length ", v.size(-2),
             " differs from key sequence length ", k.size(-2));
}

/// [..., M, K] x [..., K, N] -> [..., M, N] with equal leading dims, as one bmm.
Tensor batched_matmul(const Tensor &a, const Tensor &b) {
  Shape out = a.sizes();
  out.back() = b.size(-1);
  Tensor y = bmm(a.reshape({-1, a.size(-2), a.size(-1)}), b.reshape({-1, b.size(-2), b.size(-1)}));
  return y.reshape(out);
}

/// scores masked where `keep` (bool, broadcastable) is false: -inf there.
Tensor mask_out(const Tensor &scores, const Tensor &keep) {
  return where(keep, scores, full({}, -std::numeric_limits<double>::infinity(), scores.dtype()));
}

/// Applies a bool (true = attend) or float (added) mask to the scores.
Tensor apply_mask(const Tensor &scores, const Tensor &mask) {
  const Shape scores_shape = scores.sizes();
  const Shape joint = broadcast_shapes(scores_shape, mask.sizes(), "scaled_dot_product_attention");
  KILN_CHECK(joint == scores_shape, "scaled_dot_product_attention: attn_mask of shape ", shape_str(mask.sizes()),
             " does not broadcast to the attention weights' shape ", shape_str(scores_shape));
  if (mask.dtype() == kBool)
    return mask_out(scores, mask);
  KILN_CHECK(mask.is_floating_point(), "scaled_dot_product_attention: attn_mask must be bool or floating point, got ",
             dtype_name(mask.dtype()));
  return scores + mask.to(scores.dtype());
}

/// Lower-triangular [L, S] bool mask: position i attends to j <= i (top-left aligned).
Tensor causal_mask(int64_t L, int64_t S, Device device) {
  return le(arange(S, kInt64, device).unsqueeze(0), arange(L, kInt64, device).unsqueeze(1));
}

} // namespace

Tensor scaled_dot_product_attention(const Tensor &q, const Tensor &k, const Tensor &v, const Tensor &attn_mask,
                                    double dropout_p, bool is_causal) {
  amp::detail::AutocastOp ac("scaled_dot_product_attention");
  if (ac)
    return scaled_dot_product_attention(ac.cast(q), ac.cast(k), ac.cast(v), ac.cast(attn_mask), dropout_p, is_causal);
  check_operands(q, k, v);
  KILN_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, "scaled_dot_product_attention: dropout_p must be in [0, 1], got ",
             dropout_p);
  KILN_CHECK(!(is_causal && attn_mask.defined()), "scaled_dot_product_attention: attn_mask of shape ",
             shape_str(attn_mask.defined() ? attn_mask.sizes() : Shape{}),
             " must not be given together with is_causal = true");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor scores = batched_matmul(q, k.transpose(-2, -1)) * scale;
  if (attn_mask.defined())
    scores = apply_mask(scores, attn_mask);
  if (is_causal)
    scores = mask_out(scores, causal_mask(q.size(-2), k.size(-2), q.device()));
  Tensor weights = softmax(scores, -1);
  if (dropout_p > 0.0)
    weights = dropout(weights, dropout_p, /*training=*/true);
  return batched_matmul(weights, v);
}

} // namespace kiln::nn::functional
