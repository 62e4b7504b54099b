// tracer.h (internal) - records the ops eager execution performs into an
// ir::Graph. Values are identified by TensorImpl; a tensor the tracer has not
// seen (a parameter, a captured constant) becomes a Primal graph input bound
// to that tensor by reference.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kiln/ir/Graph.h"
#include "kiln/tensor.h"
#include "trace.h"

namespace kiln::trace {

class Tracer {
public:
  /// A lazy tracer records segments for graph breaks: kernels skip their
  /// compute (skip_compute()), every tensor it has not seen is a per-call
  /// input, and a GraphBreak calls `on_break(op)` to flush the segment
  /// (a checkpoint region's start and end call on_break(nullptr)).
  void set_lazy(std::function<void(const char *op)> on_break, bool user_grad_enabled) {
    lazy_ = true;
    on_break_ = std::move(on_break);
    user_grad_enabled_ = user_grad_enabled;
  }
  bool lazy() const { return lazy_; }
  /// Whether `t` is a value this trace computed (not an input).
  bool computed(const Tensor &t) const;
  bool user_grad_enabled() const { return user_grad_enabled_; }
  void graph_break(const char *op) { on_break_(op); }
  /// trace::checkpoint_begin/end: flush the segment so far (on_break(nullptr))
  /// and enter or leave a checkpoint region.
  void checkpoint_begin();
  void checkpoint_end();
  /// Whether the ops recorded now are inside autograd::checkpoint.
  bool in_checkpoint() const { return checkpoint_depth_ > 0; }
  /// Recorded values (not inputs) still referenced outside the tracer, with
  /// every tensor that holds each: the outputs a flushed segment must produce.
  std::vector<std::pair<int, std::vector<Tensor>>> live_values() const;
  /// Forgets everything recorded (the next segment starts empty).
  void reset();

  /// Declares a user input (in call order).
  void add_user_input(const Tensor &t);
  /// Declares the gradient of a forward output (a Tangent input).
  void add_tangent(const Tensor &t);
  /// Declares a random input redrawn by `draw(shape)` on every compiled call.
  void add_random_input(const Tensor &t, RandomDraw draw);
  /// Draw functions of the random inputs, in input order.
  const std::vector<RandomDraw> &random_draws() const { return random_draws_; }
  /// Value id of `t`, capturing it as a new Primal input if unseen.
  int value_of(const Tensor &t);
  bool knows(const Tensor &t) const { return find(t.impl()) >= 0; }
  void record(ir::OpKind kind, const std::vector<Tensor> &inputs, const Tensor &out, const struct Attrs &attrs);
  void alias(const Tensor &src, const Tensor &dst);
  /// trace::detach: an alias, or under a lazy trace a node (see detached()).
  void detach(const Tensor &src, const Tensor &dst);
  /// Lazy traces: the values recorded as `detach(operand)` (each a Reshape
  /// node to the same shape that the segment replay runs as detach()).
  const std::vector<int> &detached() const { return detached_; }
  /// Lazy traces: the values recorded under the user's NoGradGuard inside a
  /// forward run with grad mode on (the replay computes them without
  /// autograd). Lazy recording itself leaves the grad mode as the user set it
  /// and builds no autograd graph (autograd::any_requires_grad is false).
  const std::vector<int> &no_grad() const { return no_grad_; }

  /// trace::functionalizes / trace::mutate (buffer mutation).
  bool functionalizes(const Tensor &target) const;
  void mutate(const Tensor &target, const Tensor &value);
  /// The captured tensors updated in place, as indices into captured(), in
  /// the order of their first update: finish() appends their final values
  /// to the forward outputs, after the module's.
  const std::vector<int> &mutated() const { return mutated_; }
  /// Undoes the real updates of mutated captured tensors made while tracing.
  ~Tracer();
  Tracer() = default;
  Tracer(const Tracer &) = delete;
  Tracer &operator=(const Tracer &) = delete;

  /// Final graph: inputs ordered [user inputs, captured, random, tangents].
  ir::Graph finish(const std::vector<Tensor> &forward_outputs, const std::vector<Tensor> &grad_outputs);
  /// Captured tensors in input order (after the user inputs).
  const std::vector<Tensor> &captured() const { return captured_; }

private:
  int define(const Tensor &t);
  ir::Graph graph_;
  /// The value id of a live impl, or -1 (an address whose impl died and was
  /// reused by a new tensor does not match).
  int find(const TensorImpl *impl) const;
  std::unordered_map<const TensorImpl *, int> ids_;
  /// Per value id, the impls that hold it. Weak: the tracer keeps no
  /// intermediate alive, so tracing needs no more memory than eager.
  std::vector<std::vector<std::weak_ptr<TensorImpl>>> impls_;
  bool lazy_ = false, user_grad_enabled_ = false;
  int checkpoint_depth_ = 0;
  std::function<void(const char *op)> on_break_;
  std::vector<int> user_inputs_, captured_ids_, random_ids_, tangents_, detached_, no_grad_;
  std::vector<RandomDraw> random_draws_;
  std::vector<Tensor> captured_;
  std::vector<int> mutated_;                          ///< captured indices, first update order
  std::vector<int> mutation_values_;                  ///< per mutated_ entry: its latest value id
  std::vector<std::pair<Tensor, Tensor>> originals_;  ///< per mutated_ entry: (tensor, its data before the trace)
};

/// RAII: makes `tracer` the active tracer of this thread.
class TracingScope {
public:
  explicit TracingScope(Tracer *tracer);
  ~TracingScope();

private:
  Tracer *prev_;
};

/// RAII: suspends tracing (for tensors made by the tracing machinery itself).
class PauseTracing {
public:
  PauseTracing();
  ~PauseTracing();

private:
  Tracer *prev_;
};

ir::ElementType element_type(DType t);
DType dtype_of(ir::ElementType t);

}  // namespace kiln::trace
