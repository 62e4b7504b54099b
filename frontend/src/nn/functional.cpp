// linear, softmax, log_softmax: composites of traced primitives.
#include "kiln/functional.h"
#include "../amp/autocast.h"
#include "../ops/fused.h"

namespace kiln::nn::functional {

Tensor linear(const Tensor &x, const Tensor &weight, const Tensor &bias) {
  amp::detail::AutocastOp ac("linear");
  if (ac) return linear(ac.cast(x), ac.cast(weight), ac.cast(bias));
  KILN_CHECK(weight.defined() && weight.dim() == 2, "linear: weight must be 2-D [out, in], got ",
             weight.defined() ? shape_str(weight.sizes()) : std::string("undefined"));
  KILN_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ",
             x.defined() ? shape_str(x.sizes()) : std::string("undefined"), " does not end in in_features = ",
             weight.size(1));
  Tensor flat = x.dim() > 2 ? x.reshape({-1, x.size(-1)}) : x;
  Tensor y = flat.matmul(weight.t());
  if (bias.defined()) y = y + bias;
  if (x.dim() > 2) {
    Shape out = x.sizes();
    out.back() = weight.size(0);
    y = y.reshape(out);
  }
  return y;
}

Tensor log_softmax(const Tensor &x, int64_t dim) {
  amp::detail::AutocastOp ac("log_softmax");
  if (ac) return log_softmax(ac.cast(x), dim);
  KILN_CHECK(x.defined() && x.is_floating_point(), "log_softmax: expected a floating point tensor, got ",
             x.defined() ? dtype_name(x.dtype()) : "undefined");
  if (fused::applies(x)) return fused::softmax(x, dim, /*log=*/true);  // untraced eager: one kernel
  // The max shift is a constant for the gradient (log_softmax is shift
  // invariant), so it is taken from a detached copy.
  Tensor shifted = x - x.detach().amax({dim}, /*keepdim=*/true);
  return shifted - shifted.exp().sum({dim}, /*keepdim=*/true).log();
}

Tensor softmax(const Tensor &x, int64_t dim) {
  amp::detail::AutocastOp ac("softmax");
  if (ac) return softmax(ac.cast(x), dim);
  KILN_CHECK(x.defined() && x.is_floating_point(), "softmax: expected a floating point tensor, got ",
             x.defined() ? dtype_name(x.dtype()) : "undefined");
  if (fused::applies(x)) return fused::softmax(x, dim, /*log=*/false);  // untraced eager: one kernel
  Tensor e = (x - x.detach().amax({dim}, /*keepdim=*/true)).exp();
  return e / e.sum({dim}, /*keepdim=*/true);
}

}  // namespace kiln::nn::functional
