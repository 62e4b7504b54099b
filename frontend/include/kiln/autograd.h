// kiln/autograd.h - reverse-mode automatic differentiation.
//
// The design follows PyTorch's autograd engine: every differentiable op that
// sees an input requiring grad records a Node whose `next_edges` point at the
// producers of its inputs (or at the AccumulateGrad node of a leaf). Backward
// runs Nodes in dependency order, summing gradients that reach one input.
// Backward formulas use the public ops in ops.h, so tracing (kiln::compile)
// records them like any other op.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::autograd {

using TensorList = std::vector<Tensor>;

struct Node;

/// An input slot of a Node: gradients flowing along the edge go to
/// `fn`'s input number `input_nr`.
struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

/// A gradient hook: receives the gradient, returns a replacement (or an
/// undefined Tensor to keep it unchanged).
using GradHook = std::function<Tensor(const Tensor &)>;

/// A backward function. apply() takes one gradient per forward output (an
/// undefined Tensor means zero) and returns one per next_edge.
struct Node : std::enable_shared_from_this<Node> {
  Node();
  virtual ~Node() = default;
  virtual TensorList apply(const TensorList &grad_outputs) = 0;
  virtual std::string name() const = 0;
  /// Frees saved tensors after a backward pass without retain_graph.
  virtual void release_saved() {}
  /// Set by the engine before apply() when release_saved() follows it
  /// (backward without retain_graph): apply() may then consume the saved
  /// tensors (the compiled backward lends their memory to its intermediates).
  bool releases_after_apply = false;
  /// Number of forward outputs this node receives gradients for.
  int num_outputs = 1;
  /// Created inside an op that autocast runs in float32, while a compiled
  /// autocast graph was traced (internal: the engine re-enters that scope
  /// for apply(), so the traced backward is marked too).
  bool float32_scope = false;
  std::vector<Edge> next_edges;
  /// Hooks on the gradient of forward output `first` (Tensor::register_hook
  /// on a non-leaf), applied before apply().
  std::vector<std::pair<int, GradHook>> pre_hooks;
  /// Creation order; later nodes run first on ties (as PyTorch).
  uint64_t sequence_nr;
};

/// A tensor saved for backward together with the write version of its
/// storage. unpack() throws PyTorch's "modified by an inplace operation"
/// error if the storage was written since.
class SavedTensor {
public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor &t);
  /// The saved tensor; throws kiln::Error naming `node` on a version mismatch.
  Tensor unpack(const std::string &node) const;

private:
  Tensor tensor_;
  uint64_t version_ = 0;
};

/// A Node whose backward is a lambda (most ops). The lambda receives the
/// output gradients and the unpacked saved tensors (in the order given).
struct FunctionNode : Node {
  using Fn = std::function<TensorList(const TensorList &grads, const TensorList &saved)>;
  FunctionNode(std::string name, Fn fn, const TensorList &saved);
  TensorList apply(const TensorList &g) override;
  std::string name() const override { return name_; }
  void release_saved() override;

private:
  std::string name_;
  Fn fn_;
  std::vector<SavedTensor> saved_;
  bool released_ = false;
};

/// Accumulates into a leaf's .grad() (or into a capture slot during grad()).
struct AccumulateGrad : Node {
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf(std::move(leaf)) {}
  TensorList apply(const TensorList &g) override;
  std::string name() const override { return "AccumulateGrad"; }
  std::weak_ptr<TensorImpl> leaf;
  /// Tensor::register_hook on the leaf: applied before accumulation.
  std::vector<GradHook> hooks;
  /// Tensor::register_post_accumulate_grad_hook: called after .grad is updated.
  std::vector<std::function<void(const Tensor &)>> post_hooks;
  /// Called with the gradient this backward will add to .grad, before this
  /// node runs, when the node producing it announces it as final
  /// (announce_gradient) and is the only node feeding this one in the
  /// backward under way. .grad still holds its old value then; the gradient
  /// is read-only and may be the producer's memory (copy it to keep it).
  /// post_hooks still run later as usual. For reducers that start work
  /// before the producer returns (a compiled backward's gradients all-reduced
  /// while the rest of it runs: kiln::distributed::DistributedDataParallel).
  std::vector<std::function<void(const Tensor &grad)>> early_hooks;
};

/// Called by a Node from inside its apply() during backward: output `edge`
/// (an index into node.next_edges) has its final value `grad` although
/// apply() has not returned. When that edge leads to a leaf's
/// AccumulateGrad with early_hooks, no leaf hook (register_hook) that could
/// change the gradient, no other edge into it in this backward, and the
/// backward writes .grad (not grad()'s capture), its early_hooks run now
/// with `grad`; returns whether they ran. The node must then return the
/// same gradient for that edge. Anything else: returns false, no effect.
bool announce_gradient(const Node &node, size_t edge, const Tensor &grad);

/// Whether ops record autograd history (thread-local; default true).
struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

/// RAII: disables gradient recording in its scope (torch.no_grad()).
class NoGradGuard {
public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard &) = delete;
  NoGradGuard &operator=(const NoGradGuard &) = delete;

private:
  bool prev_;
};

/// RAII: enables gradient recording in its scope (torch.enable_grad()).
class EnableGradGuard {
public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }

private:
  bool prev_;
};

/// True if grad mode is on and any input requires grad.
bool any_requires_grad(const TensorList &inputs);
/// The edge a gradient for `t` must flow along (empty if !t.requires_grad()).
Edge gradient_edge(const Tensor &t);
/// Makes `node` the grad_fn of `outputs` (output_nr = position) and points
/// its next_edges at `inputs`. Call only when any_requires_grad(inputs).
void set_history(const TensorList &outputs, const std::shared_ptr<Node> &node,
                 const TensorList &inputs);
/// Records a FunctionNode named `name` as the producer of `output`, saving
/// `saved` (version-checked) for `backward(grads, saved)`. To save an op's own
/// output, pass output.detach() (no reference cycle, same storage version).
void record(const Tensor &output, const char *name, const TensorList &inputs, const TensorList &saved,
            FunctionNode::Fn backward);

/// The AccumulateGrad node of a leaf that requires grad (created on demand).
std::shared_ptr<AccumulateGrad> grad_accumulator(const Tensor &leaf);

/// Runs backward from `roots` with `grad_roots` and accumulates into the
/// .grad() of reachable leaves (Tensor::backward is this with one root).
/// Saved tensors are freed afterwards unless retain_graph; a second backward
/// through a freed graph throws kiln::Error.
void backward(const TensorList &roots, const TensorList &grad_roots, bool retain_graph = false);

/// Gradients of `outputs` w.r.t. `inputs` without touching any .grad()
/// (torch.autograd.grad). Inputs must require grad; an input the outputs do
/// not depend on gets an undefined Tensor (allow_unused semantics).
TensorList grad(const TensorList &outputs, const TensorList &grad_outputs, const TensorList &inputs,
                bool retain_graph = false);

/// Activation checkpointing (torch.utils.checkpoint, Chen et al. 2016,
/// "Training deep nets with sublinear memory cost"): runs fn(inputs) without
/// recording a graph, and in backward re-runs it with grad enabled (with the
/// default generator restored to its state at the forward, so random ops
/// draw the same numbers) and backpropagates through the recomputation.
/// Gradients reach `inputs` and any parameters fn uses.
Tensor checkpoint(const std::function<Tensor(const TensorList &)> &fn, const TensorList &inputs);

}  // namespace kiln::autograd

namespace kiln {
using autograd::EnableGradGuard;
using autograd::NoGradGuard;
}  // namespace kiln
