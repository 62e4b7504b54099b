// Classification losses: nll_loss and cross_entropy (ignore_index, label
// smoothing), as compositions of traced primitives.
#include <cmath>

#include "kiln/functional.h"
#include "../amp/autocast.h"

namespace kiln::nn::functional {
namespace {

void check_targets(const Tensor &scores, const Tensor &target, int64_t ignore_index, const char *op) {
  KILN_CHECK(scores.defined() && scores.dim() == 2, op, ": expected input of shape [N, C], got ",
             scores.defined() ? shape_str(scores.sizes()) : std::string("undefined"));
  KILN_CHECK(scores.is_floating_point(), op, ": expected a floating point input, got ", dtype_name(scores.dtype()));
  KILN_CHECK(target.defined() && target.dtype() == kInt64, op, ": expected target of dtype int64, got ",
             target.defined() ? dtype_name(target.dtype()) : "undefined");
  KILN_CHECK(target.dim() == 1 && target.size(0) == scores.size(0), op, ": expected target of shape [",
             scores.size(0), "], got ", shape_str(target.sizes()));
  KILN_CHECK(scores.size(0) > 0, op, ": empty batch (N = 0)");
  const int64_t c = scores.size(1);
  for (int64_t v : target.to_vector<int64_t>())
    KILN_CHECK(v == ignore_index || (v >= 0 && v < c), op, ": target ", v, " is out of bounds for ", c, " classes");
}

/// sum(per_sample) / weight_sum. With every sample ignored (weight_sum 0)
/// the loss is NaN and the gradient zero, as in torch: the NaN is a
/// constant, and the division (by 1 there) keeps the gradient finite.
Tensor mean_over_valid(const Tensor &per_sample, const Tensor &weight_sum) {
  Tensor none_valid = eq(weight_sum, zeros({}, weight_sum.dtype()));
  Tensor denom = where(none_valid, ones({}, weight_sum.dtype()), weight_sum);
  return where(none_valid, full({}, NAN, per_sample.dtype()), per_sample.sum() / denom);
}

/// Applies `reduction` to per-sample losses; Mean divides by the number of
/// non-ignored samples (`weight_sum`, a 0-d tensor).
Tensor reduce(const Tensor &per_sample, const Tensor &weight_sum, Reduction reduction) {
  switch (reduction) {
  case Reduction::None: return per_sample;
  case Reduction::Sum: return per_sample.sum();
  case Reduction::Mean: return mean_over_valid(per_sample, weight_sum);
  }
  return per_sample;
}

}  // namespace

Tensor nll_loss(const Tensor &log_probs, const Tensor &target, Reduction reduction, int64_t ignore_index) {
  amp::detail::AutocastOp ac("nll_loss");
  if (ac)
    return nll_loss(ac.cast(log_probs), target, reduction, ignore_index);
  check_targets(log_probs, target, ignore_index, "nll_loss");
  // one_hot[i, j] = (j == target[i]); rows whose target is ignore_index
  // (which may be a valid class number) are masked out by `valid`.
  Tensor one_hot = eq(arange(log_probs.size(1), kInt64, target.device()).unsqueeze(0), target.unsqueeze(1)).to(log_probs.dtype());
  Tensor valid = ne(target, full({}, static_cast<double>(ignore_index), kInt64)).to(log_probs.dtype());
  Tensor per_sample = -(one_hot * log_probs).sum({1}) * valid;
  return reduce(per_sample, valid.sum(), reduction);
}

Tensor cross_entropy(const Tensor &logits, const Tensor &target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  amp::detail::AutocastOp ac("cross_entropy");
  if (ac)
    return cross_entropy(ac.cast(logits), target, reduction, ignore_index, label_smoothing);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, "cross_entropy: label_smoothing must be in [0, 1], got ",
             label_smoothing);
  check_targets(logits, target, ignore_index, "cross_entropy");
  Tensor logp = log_softmax(logits, 1);
  if (label_smoothing == 0.0) return nll_loss(logp, target, reduction, ignore_index);
  const int64_t c = logits.size(1);
  Tensor valid = ne(target, full({}, static_cast<double>(ignore_index), kInt64)).to(logits.dtype());
  Tensor one_hot = eq(arange(c, kInt64, target.device()).unsqueeze(0), target.unsqueeze(1)).to(logits.dtype());
  Tensor nll = -(one_hot * logp).sum({1}) * valid;
  Tensor smooth = -logp.sum({1}) * valid / static_cast<double>(c);
  Tensor per_sample = nll * (1.0 - label_smoothing) + smooth * label_smoothing;
  return reduce(per_sample, valid.sum(), reduction);
}

}  // namespace kiln::nn::functional
