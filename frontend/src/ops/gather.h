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

/// The int64 index of `shape` whose entries along `dim` are start, start +
/// step, ... (shape[dim] of them): a 1-D constant (tensor()) reshaped and
/// expanded, so a trace captures only the 1-D positions.
Tensor window_index(const Shape &shape, int64_t dim, int64_t start, int64_t step, Device device);

/// Under a kiln::compile trace, records the strided window `out` (eager: a
/// view of `a` holding a's positions start, start + step, ... along `dim`;
/// narrow, slice) as kiln.gather(a, window_index). Without a trace:
/// nothing. `out` must not be empty (an empty window has no dialect form:
/// the caller declares a trace::GraphBreak for it).
void record_window(const Tensor &a, int64_t dim, int64_t start, int64_t step, const Tensor &out);

/// The gradient of a strided window (narrow, slice): `g` placed at positions
/// start, start + step, ... along `dim` of zeros of `in_shape`, as a
/// scatter_add (captured, and itself differentiable).
Tensor unwindow(const Tensor &g, const Shape &in_shape, int64_t dim, int64_t start, int64_t step);

}  // namespace kiln::detail
