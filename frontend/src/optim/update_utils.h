// Helpers shared by the update rules in src/optim/ (not a public header).
#pragma once

#include <map>
#include <string>

#include "kiln/tensor.h"

namespace kiln::optim {

/// Contiguous float32 copy of p's gradient (gradients may be strided views).
/// Throws kiln::Error if the gradient's shape differs from p's.
Tensor dense_grad(const Tensor &p);

/// Adds one to state["step"] (a 0-d float32 tensor, created at 0, as
/// PyTorch's) and returns the new count.
float increment_step(std::map<std::string, Tensor> &state);

}  // namespace kiln::optim
