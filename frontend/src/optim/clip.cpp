// nn::utils::clip_grad_value_ (declared in kiln/optim.h; clip_grad_norm_ is
// in src/nn/module.cpp).
#include <algorithm>
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/optim.h"

namespace kiln::nn::utils {

void clip_grad_value_(const std::vector<Tensor> &parameters, double clip_value) {
  KILN_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  const float hi = static_cast<float>(clip_value), lo = -hi;
  for (const Tensor &p : parameters) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // Clamped in float32 (kiln::clamp: the bounds rounded to float32, NaN
    // kept) on the gradient's device, written back in place.
    g.copy_(clamp(g.to(kFloat32), lo, hi));
  }
}

}  // namespace kiln::nn::utils
