// trace.h (internal) - the hook every op calls so kiln::compile can record
// what eager execution does. When no tracer is active these are no-ops.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/ir/Graph.h"
#include "kiln/error.h"
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

/// Autocast scopes of a compiled graph (for the kiln-autocast pass). Eager
/// autocast runs an op whose policy is float32 (softmax, log_softmax,
/// layer_norm, ...) wholly in float32, and its backward too, because it
/// computes on float32 tensors; a trace records such an op as primitive
/// ops (sub, exp, ...) whose own policies would run them in bf16/f16. While
/// recording is on (a compile with CompileOptions::autocast), every node
/// recorded inside a Float32Scope is marked (ir::Node::float32_scope) and
/// kiln-autocast computes it in float32, as eager autocast does.
class RecordAutocastScopes {
public:
  explicit RecordAutocastScopes(bool on);
  ~RecordAutocastScopes();
  RecordAutocastScopes(const RecordAutocastScopes &) = delete;
  RecordAutocastScopes &operator=(const RecordAutocastScopes &) = delete;

private:
  bool prev_;
};

/// Nodes recorded while alive (and `enter` is true) run in float32 under
/// autocast. Entered by amp::detail::AutocastOp for float32-policy ops, by
/// the backward engine around a node created in such a scope, and around
/// the engine's gradient accumulation (eager accumulates a tensor's
/// gradients in its own, float32, type). Nestable; without recording on,
/// nothing is marked.
class Float32Scope {
public:
  explicit Float32Scope(bool enter = true);
  ~Float32Scope();
  Float32Scope(const Float32Scope &) = delete;
  Float32Scope &operator=(const Float32Scope &) = delete;

private:
  bool entered_;
};

/// True when a node recorded now would be marked float32_scope.
bool in_float32_scope();
/// Records `out = kind(inputs...)`.
void record(ir::OpKind kind, const std::vector<Tensor> &inputs, const Tensor &out,
            const Attrs &attrs = {});
/// In-place updates of captured state (buffer mutation, functionalized as
/// torch.compile's AOTAutograd does): under a whole-graph trace, an update
/// of a tensor the trace captures (a module buffer such as BatchNorm's
/// running_mean, updated under no_grad; not a user input, not a value the
/// trace computed, not one that requires grad) is no graph break. The
/// in-place op records its out-of-place form and calls mutate(target,
/// value): later reads of `target` in the trace see `value`, the graph gets
/// the final value as an extra forward output, and every compiled call
/// writes it into the tensor (CompiledModule::forward). The real update made
/// while tracing is undone when the trace ends, so it happens once per call.
/// True when an in-place update of `target` is recorded this way.
bool functionalizes(const Tensor &target);
/// `target` now holds `value` (see functionalizes; the caller checked it).
void mutate(const Tensor &target, const Tensor &value);
/// Records that `dst` holds the same value as `src` (detach, contiguous, clone).
void alias(const Tensor &src, const Tensor &dst);
/// Records that `dst` is `src` detached: the same value, through which no
/// gradient flows. Under a whole-graph trace (where eager autograd itself
/// sees the detach) it is an alias; under a lazy segment trace it is a node
/// that the segment's replay runs as detach().
void detach(const Tensor &src, const Tensor &dst);
/// True while a lazy segment trace runs and `t` is a value it computed, which
/// has no data yet (a copy of any other tensor is made for real).
bool lazy_value(const Tensor &t);
/// True while a lazy (segment) trace runs: the eager kernels skip their
/// compute, because the values are produced by the compiled segment when it
/// is flushed (see GraphBreak).
bool skip_compute();

/// Called before a tensor's values are read on the host (to_vector): under a
/// lazy segment trace a tensor the segment computed has no values yet, so
/// the segment is compiled and run first (a graph break named "data read").
void read_data(const Tensor &t);

/// The error a whole-graph trace throws at an op it cannot capture; the
/// compile frontend catches it and switches the module to graph breaks.
struct GraphBreakError : Error {
  GraphBreakError(const std::string &what, std::string op) : Error(what), op(std::move(op)) {}
  std::string op;
};

/// Declared at the top of every op that cannot be captured (data-dependent
/// results such as item()/argmax, ops without a kiln dialect form), before
/// it computes anything. Without a tracer: nothing. Under a whole-graph
/// trace: throws GraphBreakError naming `op`. Under a lazy segment trace
/// (graph breaks): compiles and runs the segment recorded so far, which
/// gives every live tensor its value, then pauses tracing until the scope
/// ends, so the op runs eagerly on real values; its results enter the next
/// segment as inputs.
class GraphBreak {
public:
  explicit GraphBreak(const char *op);
  ~GraphBreak();
  GraphBreak(const GraphBreak &) = delete;
  GraphBreak &operator=(const GraphBreak &) = delete;

private:
  void *prev_ = nullptr;  ///< the paused tracer
  bool paused_ = false;
};

/// autograd::checkpoint's region, for lazy segment traces (graph breaks):
/// checkpoint_begin() flushes the segment recorded so far, and
/// checkpoint_end() flushes the ops recorded since as a segment of their own
/// that saves nothing for backward and recomputes its forward there (so a
/// user's checkpoint keeps its memory saving after a graph break). Outside
/// a lazy trace: nothing (a whole-graph trace records the checkpoint's
/// forward and its recomputation through eager autograd). Call them in
/// pairs; regions nest.
void checkpoint_begin();
void checkpoint_end();

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
