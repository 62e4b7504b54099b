// Regression and binary losses: mse_loss and binary_cross_entropy_with_logits
// (with pos_weight), as compositions of traced primitives.
#include "kiln/functional.h"
#include "../amp/autocast.h"

namespace kiln::nn::functional {
namespace {

void check_pair(const Tensor &input, const Tensor &target, const char *op) {
  KILN_CHECK(input.defined() && input.is_floating_point(), op, ": expected a floating point input, got ",
             input.defined() ? dtype_name(input.dtype()) : "undefined");
  KILN_CHECK(target.defined() && target.is_floating_point(), op, ": expected a floating point target, got ",
             target.defined() ? dtype_name(target.dtype()) : "undefined");
  KILN_CHECK(input.sizes() == target.sizes(), op, ": target shape ", shape_str(target.sizes()),
             " must match input shape ", shape_str(input.sizes()));
}

Tensor reduce(const Tensor &loss, Reduction reduction) {
  switch (reduction) {
  case Reduction::None: return loss;
  case Reduction::Sum: return loss.sum();
  case Reduction::Mean: return loss.mean();
  }
  return loss;
}

}  // namespace

Tensor mse_loss(const Tensor &input, const Tensor &target, Reduction reduction) {
  amp::detail::AutocastOp ac("mse_loss");
  if (ac) return mse_loss(ac.cast(input), ac.cast(target), reduction);
  check_pair(input, target, "mse_loss");
  Tensor diff = input - target;
  return reduce(diff * diff, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor &input, const Tensor &target, Reduction reduction,
                                        const Tensor &pos_weight) {
  amp::detail::AutocastOp ac("binary_cross_entropy_with_logits");
  if (ac)
    return binary_cross_entropy_with_logits(ac.cast(input), ac.cast(target), reduction, ac.cast(pos_weight));
  check_pair(input, target, "binary_cross_entropy_with_logits");
  // PyTorch's stable form (aten/src/ATen/native/Loss.cpp): with m = max(-x, 0),
  // log(1 + exp(-x)) = m + log(exp(-m) + exp(-x - m)); the loss is
  // (1 - t) x + w_log * log(1 + exp(-x)) with w_log = 1 + (pos_weight - 1) t.
  Tensor m = relu(-input);
  Tensor softplus_neg = m + (exp(-m) + exp(-input - m)).log();
  Tensor loss;
  if (pos_weight.defined()) {
    KILN_CHECK(pos_weight.is_floating_point(), "binary_cross_entropy_with_logits: expected a floating point "
               "pos_weight, got ", dtype_name(pos_weight.dtype()));
    Shape s = broadcast_shapes(input.sizes(), pos_weight.sizes(), "binary_cross_entropy_with_logits");
    KILN_CHECK(s == input.sizes(), "binary_cross_entropy_with_logits: pos_weight ", shape_str(pos_weight.sizes()),
               " must broadcast to the input shape ", shape_str(input.sizes()), " (got ", shape_str(s), ")");
    Tensor log_weight = (pos_weight - 1.0) * target + 1.0;
    loss = (-target + 1.0) * input + log_weight * softplus_neg;
  } else {
    loss = (-target + 1.0) * input + softplus_neg;
  }
  return reduce(loss, reduction);
}

}  // namespace kiln::nn::functional
