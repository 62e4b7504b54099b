// gather.h (internal) - gather with the name of the op the user called, for
// the ops that are gathers (index_select, nn::functional::embedding): an
// out-of-range index raises that op's error, in eager and in every compiled
// call (the traced kiln.gather carries the name, runtime/IndexCheck.h).
#pragma once

#include "kiln/ir/Graph.h"
#include "kiln/tensor.h"

namespace kiln::detail {

/// torch.gather(a, dim, index) (int64 index of a's rank, no larger than a
/// in every dim but `dim`; the result has index's shape), whose errors
/// name `source`. Differentiable in `a` (backward: scatter_add into zeros).
Tensor gather_as(const Tensor &a, int64_t dim, const Tensor &index, ir::IndexSource source);

}  // namespace kiln::detail
