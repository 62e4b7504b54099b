// trace.h (internal) - the hook every op calls so kiln::compile can record
// what eager execution does. When no tracer is active these are no-ops.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/ir/Graph.h"
#include "kiln/tensor.h"

namespace kiln::trace {

struct Attrs {
  std::vector<int64_t> ints;
  bool keepdim = false;
  double scalar = 0.0;
  ir::Predicate predicate = ir::Predicate::EQ;
};

/// True while a kiln::compile trace is running on this thread.
bool active();
/// Records `out = kind(inputs...)`.
void record(ir::OpKind kind, const std::vector<Tensor> &inputs, const Tensor &out,
            const Attrs &attrs = {});
/// Records that `dst` holds the same value as `src` (detach, contiguous, clone).
void alias(const Tensor &src, const Tensor &dst);
/// Throws kiln::Error when tracing: `op` cannot be captured by kiln::compile.
void unsupported(const char *op);

/// Draws a random tensor of the given shape (the shape is an argument so a
/// shape-generic compiled graph can draw at the size of each call).
using RandomDraw = std::function<Tensor(const Shape &)>;

/// A tensor of `shape` drawn from a random source (a dropout mask). While
/// tracing it becomes a graph input that the compiled function draws afresh
/// with `draw` on every call, in trace order, so compiled and eager runs
/// consume the default generator identically and see the same masks.
/// Otherwise: draw(shape).
Tensor random_input(const Shape &shape, const RandomDraw &draw);

}  // namespace kiln::trace
