// The backward engine: dependency counting + a ready queue ordered by
// sequence number (latest first), as PyTorch's engine does on one thread.
#include <atomic>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/random.h"
#include "../amp/autocast.h"
#include "../trace.h"
#include "../trace.h"

namespace kiln::autograd {
namespace {

thread_local bool grad_mode_enabled = true;
std::atomic<uint64_t> next_sequence_nr{0};

/// When grad() runs, AccumulateGrad nodes write here instead of into .grad.
thread_local std::unordered_map<const TensorImpl *, Tensor> *capture = nullptr;

Tensor accumulate(const Tensor &acc, const Tensor &g) {
  if (!acc.defined()) return g;
  if (!g.defined()) return acc;
  trace::Float32Scope scope;  // a compiled autocast graph sums gradients in float32 (kiln-autocast)
  return acc + g;
}

/// The backward under way on this thread (announce_gradient's view of it):
/// the gradients each node still waits for, the sums delivered so far, and
/// the node being applied. Nested backwards (checkpoint's recomputation)
/// stack.
struct GraphTask {
  const std::unordered_map<Node *, int> *dependencies;
  const std::map<Node *, TensorList> *buffers;
  const Node *running = nullptr;
};
thread_local GraphTask *current_task = nullptr;

/// Runs the graph below `roots`. Gradients reaching leaves go to AccumulateGrad.
void run_backward(const TensorList &roots, const TensorList &grad_roots, bool retain_graph) {
  // Backward formulas run in the dtypes the forward saved, never re-cast by
  // an enclosing autocast region.
  amp::detail::ExcludeGuard no_autocast;
  // Build the graph task: count how many gradients each node will receive.
  std::unordered_map<Node *, int> dependencies;
  std::vector<Node *> stack;
  std::unordered_set<Node *> seen;
  auto graph_root = std::make_shared<FunctionNode>(
      "GraphRoot", [](const TensorList &g, const TensorList &) { return g; }, TensorList{});
  for (const Tensor &r : roots) graph_root->next_edges.push_back(gradient_edge(r));
  stack.push_back(graph_root.get());
  seen.insert(graph_root.get());
  while (!stack.empty()) {
    Node *n = stack.back();
    stack.pop_back();
    for (const Edge &e : n->next_edges) {
      if (!e.valid()) continue;
      ++dependencies[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  struct Ready {
    std::shared_ptr<Node> node;
    bool operator<(const Ready &o) const { return node->sequence_nr < o.node->sequence_nr; }
  };
  std::map<Node *, TensorList> buffers;  // input gradients per node
  std::priority_queue<Ready> ready;

  auto deliver = [&](const TensorList &grads, const std::vector<Edge> &edges) {
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge &e = edges[i];
      if (!e.valid()) continue;
      TensorList &buf = buffers[e.fn.get()];
      if (buf.size() < static_cast<size_t>(e.fn->num_outputs)) buf.resize(e.fn->num_outputs);
      if (i < grads.size()) buf[e.input_nr] = accumulate(buf[e.input_nr], grads[i]);
      if (--dependencies[e.fn.get()] == 0) ready.push(Ready{e.fn});
    }
  };
  GraphTask task{&dependencies, &buffers};
  struct Restore {
    GraphTask *prev;
    ~Restore() { current_task = prev; }
  } restore{current_task};
  current_task = &task;
  deliver(grad_roots, graph_root->next_edges);
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top().node;
    ready.pop();
    TensorList inputs = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    inputs.resize(node->num_outputs);
    for (auto &[index, hook] : node->pre_hooks)
      if (inputs[index].defined())
        if (Tensor replaced = hook(inputs[index]); replaced.defined()) inputs[index] = replaced;
    bool any = false;
    for (const Tensor &t : inputs) any |= t.defined();
    if (!any) {  // nothing flows: propagate "no gradient" to unblock dependents
      deliver(TensorList(node->next_edges.size()), node->next_edges);
      continue;
    }
    node->releases_after_apply = !retain_graph;
    TensorList outputs;
    {
      trace::Float32Scope scope(node->float32_scope);  // the backward of a float32-policy op
      task.running = node.get();
      outputs = node->apply(inputs);
      task.running = nullptr;
    }
    if (!retain_graph) node->release_saved();
    KILN_CHECK(outputs.size() == node->next_edges.size(), "backward: ", node->name(), " returned ",
               outputs.size(), " gradients, expected ", node->next_edges.size());
    deliver(outputs, node->next_edges);
  }
}

/// The backward inside checkpoint's node: runs the graph of the recomputed
/// `out` with gradient `g`. Gradients reaching leaves go where the enclosing
/// backward sends them (.grad under backward(), grad()'s slots under grad(),
/// so a compiled trace, which uses grad(), sees the parameters' gradients and
/// writes no .grad). Returns the gradients of `inputs` (fresh leaves; undefined
/// for those that get none).
TensorList recompute_backward(const Tensor &out, const Tensor &g, const TensorList &inputs) {
  NoGradGuard no_grad;
  run_backward({out}, {g}, /*retain_graph=*/false);
  TensorList grads;
  for (const Tensor &in : inputs) {
    if (!in.requires_grad()) {
      grads.emplace_back();
    } else if (!capture) {
      grads.push_back(in.grad());
    } else {
      auto it = capture->find(in.impl());
      grads.push_back(it == capture->end() ? Tensor() : it->second);
      if (it != capture->end()) capture->erase(it);
    }
  }
  return grads;
}

}  // namespace

Node::Node() : sequence_nr(next_sequence_nr++) { float32_scope = trace::in_float32_scope(); }

std::shared_ptr<AccumulateGrad> grad_accumulator(const Tensor &leaf) {
  auto &meta = leaf.impl()->autograd;
  if (auto existing = meta.grad_accumulator.lock()) return std::static_pointer_cast<AccumulateGrad>(existing);
  auto node = std::make_shared<AccumulateGrad>(std::weak_ptr<TensorImpl>(leaf.impl_ptr()));
  meta.grad_accumulator = node;
  return node;
}

SavedTensor::SavedTensor(const Tensor &t) : tensor_(t), version_(t.defined() ? t._version() : 0) {}

Tensor SavedTensor::unpack(const std::string &node) const {
  if (tensor_.defined() && tensor_._version() != version_)
    throw Error("backward: one of the variables needed for gradient computation has been modified by an "
                "inplace operation: [" + std::string(dtype_name(tensor_.dtype())) + " " + shape_str(tensor_.sizes()) +
                "], which is output 0 of " + node + ", is at version " + std::to_string(tensor_._version()) +
                "; expected version " + std::to_string(version_) +
                " instead. Avoid modifying tensors in place between the forward and backward pass (use an "
                "out-of-place op or clone() first)");
  return tensor_;
}

FunctionNode::FunctionNode(std::string name, Fn fn, const TensorList &saved) : name_(std::move(name)), fn_(std::move(fn)) {
  for (const Tensor &t : saved) saved_.emplace_back(t);
}

TensorList FunctionNode::apply(const TensorList &g) {
  KILN_CHECK(!released_, "backward: trying to backward through the graph a second time (or directly access saved "
             "tensors after they have already been freed) at ", name_, ". Saved intermediate values of the graph are "
             "freed when you call backward() or autograd::grad(). Pass retain_graph=true to the first call if you "
             "need to backward through the graph a second time");
  TensorList saved;
  saved.reserve(saved_.size());
  for (const SavedTensor &s : saved_) saved.push_back(s.unpack(name_));
  return fn_(g, saved);
}

void FunctionNode::release_saved() {
  if (saved_.empty()) return;  // nothing saved: running again is harmless
  saved_.clear();
  released_ = true;
}

bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

TensorList AccumulateGrad::apply(const TensorList &g) {
  auto impl = leaf.lock();
  if (!impl || !g[0].defined()) return {};
  Tensor grad = g[0];
  for (const GradHook &hook : hooks)
    if (Tensor replaced = hook(grad); replaced.defined()) grad = replaced;
  if (capture) {
    Tensor &slot = (*capture)[impl.get()];
    slot = accumulate(slot, grad);
    return {};
  }
  Tensor t(impl);
  KILN_CHECK(grad.sizes() == t.sizes(), "backward: gradient of shape ", shape_str(grad.sizes()),
             " for a leaf of shape ", shape_str(t.sizes()));
  Tensor old = t.grad();
  // detach: .grad never carries history (no create_graph support yet).
  t.set_grad(old.defined() ? (old + grad).detach() : grad.detach());
  for (const auto &hook : post_hooks) hook(t);
  return {};
}

bool announce_gradient(const Node &node, size_t edge, const Tensor &grad) {
  GraphTask *task = current_task;
  if (!task || task->running != &node || capture || edge >= node.next_edges.size() || !grad.defined()) return false;
  auto *acc = dynamic_cast<AccumulateGrad *>(node.next_edges[edge].fn.get());
  if (!acc || acc->early_hooks.empty() || !acc->hooks.empty() || acc->leaf.expired()) return false;
  // This node has not delivered yet, so its edge is among those the leaf
  // still waits for: one left and nothing delivered means it is the only one.
  auto it = task->dependencies->find(acc);
  if (it == task->dependencies->end() || it->second != 1 || task->buffers->count(acc)) return false;
  for (const auto &hook : acc->early_hooks) hook(grad);
  return true;
}

bool any_requires_grad(const TensorList &inputs) {
  // A lazy segment trace (kiln::compile after a graph break) records ops
  // without values: each flushed segment gives its outputs their grad_fn.
  if (!GradMode::is_enabled() || trace::skip_compute()) return false;
  for (const Tensor &t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor &t) {
  if (!t.defined() || !t.requires_grad()) return {};
  const auto &meta = t.impl()->autograd;
  if (meta.grad_fn) return Edge{meta.grad_fn, meta.output_nr};
  return Edge{grad_accumulator(t), 0};
}

void set_history(const TensorList &outputs, const std::shared_ptr<Node> &node, const TensorList &inputs) {
  node->next_edges.clear();
  for (const Tensor &in : inputs) node->next_edges.push_back(gradient_edge(in));
  node->num_outputs = static_cast<int>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto &meta = outputs[i].impl()->autograd;
    meta.grad_fn = node;
    meta.output_nr = static_cast<int>(i);
  }
}

void record(const Tensor &output, const char *name, const TensorList &inputs, const TensorList &saved,
            FunctionNode::Fn backward) {
  set_history({output}, std::make_shared<FunctionNode>(name, std::move(backward), saved), inputs);
}

void backward(const TensorList &roots, const TensorList &grad_roots, bool retain_graph) {
  KILN_CHECK(roots.size() == grad_roots.size(), "backward: ", roots.size(), " outputs but ",
             grad_roots.size(), " gradients");
  // A trace cannot record .grad accumulation: inside kiln::compile the call
  // would fill .grad once while tracing and never on cached calls.
  KILN_CHECK(!trace::active(), "backward: called inside a function or module compiled by kiln::compile; return the "
             "loss and call loss.backward() outside the compiled call (it runs the compiled backward)");
  // Backward formulas never build a graph of their own (no create_graph).
  NoGradGuard no_grad;
  auto *prev = capture;
  capture = nullptr;  // a backward() called inside grad() accumulates into .grad, as in PyTorch
  try {
    run_backward(roots, grad_roots, retain_graph);
  } catch (...) {
    capture = prev;
    throw;
  }
  capture = prev;
}

TensorList grad(const TensorList &outputs, const TensorList &grad_outputs, const TensorList &inputs,
                bool retain_graph) {
  KILN_CHECK(outputs.size() == grad_outputs.size(), "autograd::grad: ", outputs.size(), " outputs but ",
             grad_outputs.size(), " grad_outputs");
  for (const Tensor &in : inputs) {
    KILN_CHECK(in.defined() && in.requires_grad(), "autograd::grad: one of the inputs does not require grad");
    KILN_CHECK(in.is_leaf(), "autograd::grad: only leaf inputs are supported; detach() the input and "
               "call requires_grad_() on it");
  }
  std::unordered_map<const TensorImpl *, Tensor> slots;
  auto *prev = capture;
  capture = &slots;
  try {
    NoGradGuard no_grad;
    run_backward(outputs, grad_outputs, retain_graph);
  } catch (...) {
    capture = prev;
    throw;
  }
  capture = prev;
  TensorList result;
  for (const Tensor &in : inputs) {
    auto it = slots.find(in.impl());
    result.push_back(it == slots.end() ? Tensor() : it->second);
  }
  return result;
}

Tensor checkpoint(const std::function<Tensor(const TensorList &)> &fn, const TensorList &inputs) {
  Generator &gen = default_generator();
  const uint64_t seed = gen.seed(), offset = gen.offset();
  Tensor out;
  trace::checkpoint_begin();  // kiln::compile's segments: fn's ops are recomputed in backward
  const bool lazy = trace::skip_compute();  // fn is recorded, not run: its segment's grad_fn comes at the flush
  {
    std::optional<NoGradGuard> no_grad;
    if (!lazy) no_grad.emplace();
    out = fn(inputs);
  }
  KILN_CHECK(out.defined(), "checkpoint: fn returned an undefined tensor");
  trace::checkpoint_end();
  if (!GradMode::is_enabled() || lazy) return out;
  // Gradients may also flow to parameters inside fn, so the node is recorded
  // whenever grad mode is on; its edges cover the explicit inputs.
  auto node = std::make_shared<FunctionNode>(
      "CheckpointBackward",
      [fn, seed, offset](const TensorList &g, const TensorList &saved) -> TensorList {
        TensorList detached;
        for (const Tensor &in : saved) {
          Tensor d = in.detach();
          if (in.requires_grad()) d.requires_grad_(true);
          detached.push_back(d);
        }
        Generator &gen = default_generator();
        const uint64_t seed_now = gen.seed(), offset_now = gen.offset();
        gen.manual_seed(seed);
        gen.set_offset(offset);
        Tensor recomputed;
        {
          EnableGradGuard enable;
          recomputed = fn(detached);
        }
        gen.manual_seed(seed_now);
        gen.set_offset(offset_now);
        if (!recomputed.requires_grad()) return TensorList(detached.size());
        return recompute_backward(recomputed, g[0], detached);
      },
      inputs);
  set_history({out}, node, inputs);
  out.impl()->autograd.requires_grad = false;
  return out;
}

}  // namespace kiln::autograd
