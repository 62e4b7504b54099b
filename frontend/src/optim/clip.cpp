// nn::utils::clip_grad_value_ (declared in kiln/optim.h; clip_grad_norm_ is
// in src/nn/module.cpp).
#include <algorithm>
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/optim.h"

namespace kiln::nn::utils {

void clip_grad_value_(const std::vector<Tensor> &parameters, double clip_value) {
  KILN_CHECK(clip_value >= 0.0, "clip_grad_value_: clip_value must be >= 0, got ", clip_value);
  NoGradGuard no_grad;
  const float hi = static_cast<float>(clip_value), lo = -hi;
  for (const Tensor &p : parameters) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // A contiguous float32 gradient is clamped in place; anything else
    // (strided views, 16-bit dtypes) through a float32 copy written back.
    Tensor dense = g.to(kFloat32).contiguous();
    float *d = dense.data_ptr<float>();
    for (int64_t j = 0, n = dense.numel(); j < n; ++j) d[j] = std::min(std::max(d[j], lo), hi);
    if (dense.impl() != g.impl()) g.copy_(dense);
  }
}

}  // namespace kiln::nn::utils
