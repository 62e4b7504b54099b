#include "compile/tracer.h"

#include <algorithm>

#include "trace.h"
#include "kiln/autograd.h"

namespace kiln::trace {
namespace {
thread_local Tracer *current = nullptr;
}

ir::ElementType element_type(DType t) {
  switch (t) {
  case DType::Float32: return ir::ElementType::F32;
  case DType::Float16: return ir::ElementType::F16;
  case DType::BFloat16: return ir::ElementType::BF16;
  case DType::Int64: return ir::ElementType::I64;
  case DType::Bool: return ir::ElementType::Bool;
  case DType::Float64: return ir::ElementType::F64;
  case DType::Int32: return ir::ElementType::I32;
  }
  return ir::ElementType::F32;
}

DType dtype_of(ir::ElementType t) {
  switch (t) {
  case ir::ElementType::F32: return kFloat32;
  case ir::ElementType::F16: return kFloat16;
  case ir::ElementType::BF16: return kBFloat16;
  case ir::ElementType::I64: return kInt64;
  case ir::ElementType::Bool: return kBool;
  case ir::ElementType::F64: return kFloat64;
  case ir::ElementType::I32: return kInt32;
  }
  return kFloat32;
}

int Tracer::define(const Tensor &t) {
  int id = graph_.addValue(t.sizes(), element_type(t.dtype()));
  ids_[t.impl()] = id;
  impls_.resize(graph_.values.size());
  impls_[id].push_back(t.impl_ptr());
  return id;
}

int Tracer::find(const TensorImpl *impl) const {
  auto it = ids_.find(impl);
  if (it == ids_.end()) return -1;
  for (const auto &w : impls_[it->second])
    if (auto p = w.lock(); p && p.get() == impl) return it->second;
  return -1;
}

bool Tracer::computed(const Tensor &t) const {
  const int id = find(t.impl());
  if (id < 0) return false;
  for (const auto *ids : {&user_inputs_, &captured_ids_, &random_ids_, &tangents_})
    for (int input : *ids)
      if (input == id) return false;
  return true;
}

std::vector<std::pair<int, std::vector<Tensor>>> Tracer::live_values() const {
  std::vector<bool> is_input(graph_.values.size(), false);
  for (const auto *ids : {&user_inputs_, &captured_ids_, &random_ids_, &tangents_})
    for (int id : *ids) is_input[id] = true;
  std::vector<std::pair<int, std::vector<Tensor>>> live;
  for (size_t id = 0; id < impls_.size(); ++id) {
    if (is_input[id]) continue;
    std::vector<Tensor> holders;
    for (const auto &w : impls_[id])
      if (auto impl = w.lock()) holders.push_back(Tensor(std::move(impl)));
    if (!holders.empty()) live.emplace_back(static_cast<int>(id), std::move(holders));
  }
  return live;
}

void Tracer::reset() {
  graph_ = ir::Graph();
  ids_.clear();
  impls_.clear();
  user_inputs_.clear();
  captured_ids_.clear();
  random_ids_.clear();
  tangents_.clear();
  random_draws_.clear();
  captured_.clear();
  detached_.clear();
  no_grad_.clear();
}

void Tracer::checkpoint_begin() {
  on_break_(nullptr);
  ++checkpoint_depth_;
}

void Tracer::checkpoint_end() {
  on_break_(nullptr);  // the region's ops: flushed as a checkpointed segment
  --checkpoint_depth_;
}

void Tracer::add_user_input(const Tensor &t) { user_inputs_.push_back(define(t)); }
void Tracer::add_tangent(const Tensor &t) { tangents_.push_back(define(t)); }

void Tracer::add_random_input(const Tensor &t, RandomDraw draw) {
  if (lazy_) {  // drawn for real in this call: a plain per-call input
    value_of(t);
    return;
  }
  random_ids_.push_back(define(t));
  random_draws_.push_back(std::move(draw));
}

int Tracer::value_of(const Tensor &t) {
  if (int id = find(t.impl()); id >= 0) return id;
  int id = define(t);
  captured_ids_.push_back(id);
  captured_.push_back(t);
  return id;
}

void Tracer::record(ir::OpKind kind, const std::vector<Tensor> &inputs, const Tensor &out, const Attrs &attrs) {
  ir::Node node;
  node.kind = kind;
  for (const Tensor &in : inputs) node.operands.push_back(value_of(in));
  node.ints = attrs.ints;
  node.keepdim = attrs.keepdim;
  node.scalar = attrs.scalar;
  node.predicate = attrs.predicate;
  node.float32_scope = in_float32_scope();
  node.result = define(out);
  if (lazy_ && user_grad_enabled_ && !autograd::GradMode::is_enabled()) no_grad_.push_back(node.result);
  graph_.nodes.push_back(std::move(node));
}

void Tracer::alias(const Tensor &src, const Tensor &dst) {
  // A lazy trace replays the graph with autograd: a copy of a tensor it did
  // not compute (an input, a parameter, a real result of a graph break) is
  // an identity node, so dst is a value of the segment, linked to its source
  // and given a gradient edge at the flush.
  if (lazy_ && !computed(src)) {
    record(ir::OpKind::Reshape, {src}, dst, Attrs{});
    return;
  }
  const int id = find(src.impl());
  if (id < 0) return;  // whole-graph trace, unseen source: dst is captured on first use (eager autograd links them)
  ids_[dst.impl()] = id;
  impls_[id].push_back(dst.impl_ptr());
}

void Tracer::detach(const Tensor &src, const Tensor &dst) {
  if (!lazy_) return alias(src, dst);
  if (!knows(src)) return;  // an unseen tensor: dst is captured on first use, without a gradient
  record(ir::OpKind::Reshape, {src}, dst, Attrs{});
  detached_.push_back(find(dst.impl()));
}

/// The index in captured_ of the tensor held by `impl`, or -1.
static int captured_index(const std::vector<Tensor> &captured, const TensorImpl *impl) {
  for (size_t i = 0; i < captured.size(); ++i)
    if (captured[i].impl() == impl) return static_cast<int>(i);
  return -1;
}

bool Tracer::functionalizes(const Tensor &target) const {
  if (lazy_ || target.requires_grad()) return false;
  return find(target.impl()) < 0 || captured_index(captured_, target.impl()) >= 0;
}

void Tracer::mutate(const Tensor &target, const Tensor &value) {
  const int id = value_of(value);
  value_of(target);  // captured (an input) if the update did not read it
  const int index = captured_index(captured_, target.impl());
  if (index < 0) return;  // functionalizes() said otherwise: nothing to write back
  auto it = std::find(mutated_.begin(), mutated_.end(), index);
  if (it == mutated_.end()) {
    PauseTracing pause;
    NoGradGuard no_grad;
    mutated_.push_back(index);
    mutation_values_.push_back(id);
    originals_.emplace_back(target, target.clone());
  } else {
    mutation_values_[it - mutated_.begin()] = id;
  }
  ids_[target.impl()] = id;  // later reads in this trace see the new value
  impls_[id].push_back(target.impl_ptr());
}

Tracer::~Tracer() {
  PauseTracing pause;
  NoGradGuard no_grad;
  for (auto &[target, original] : originals_) {
    auto &version = target.impl()->storage->version;
    const uint64_t before = version.load();
    Tensor(target).copy_(original);
    version.store(before);
  }
}

ir::Graph Tracer::finish(const std::vector<Tensor> &forward_outputs, const std::vector<Tensor> &grad_outputs) {
  std::vector<int> outputs;  // first: an output may capture a new input
  for (const Tensor &t : forward_outputs) outputs.push_back(value_of(t));
  for (int id : mutation_values_) outputs.push_back(id);  // buffer mutations: written back after each call
  for (const Tensor &t : grad_outputs) outputs.push_back(value_of(t));
  ir::Graph g = graph_;
  g.outputs = outputs;
  for (int id : user_inputs_) g.inputs.push_back(id), g.input_roles.push_back(ir::InputRole::Primal);
  for (int id : captured_ids_) g.inputs.push_back(id), g.input_roles.push_back(ir::InputRole::Primal);
  for (int id : random_ids_) g.inputs.push_back(id), g.input_roles.push_back(ir::InputRole::Primal);
  for (int id : tangents_) g.inputs.push_back(id), g.input_roles.push_back(ir::InputRole::Tangent);
  g.num_forward_outputs = static_cast<int>(forward_outputs.size() + mutation_values_.size());
  return g;
}

TracingScope::TracingScope(Tracer *tracer) : prev_(current) { current = tracer; }
TracingScope::~TracingScope() { current = prev_; }
PauseTracing::PauseTracing() : prev_(current) { current = nullptr; }
PauseTracing::~PauseTracing() { current = prev_; }

// ---- the hooks ops call (trace.h) -------------------------------------------

bool active() { return current != nullptr; }

namespace {
thread_local bool recording_scopes = false;
thread_local int float32_depth = 0;
} // namespace

RecordAutocastScopes::RecordAutocastScopes(bool on) : prev_(recording_scopes) { recording_scopes = on; }
RecordAutocastScopes::~RecordAutocastScopes() { recording_scopes = prev_; }

Float32Scope::Float32Scope(bool enter) : entered_(enter) {
  if (entered_) ++float32_depth;
}
Float32Scope::~Float32Scope() {
  if (entered_) --float32_depth;
}

bool in_float32_scope() { return recording_scopes && float32_depth > 0; }

void record(ir::OpKind kind, const std::vector<Tensor> &inputs, const Tensor &out, const Attrs &attrs) {
  if (current) current->record(kind, inputs, out, attrs);
}

void alias(const Tensor &src, const Tensor &dst) {
  if (current) current->alias(src, dst);
}

bool functionalizes(const Tensor &target) { return current != nullptr && current->functionalizes(target); }

void mutate(const Tensor &target, const Tensor &value) {
  if (current) current->mutate(target, value);
}

Tensor random_input(const Shape &shape, const RandomDraw &draw) {
  if (!current) return draw(shape);
  Tracer *tracer = current;
  Tensor t;
  {
    PauseTracing pause;  // the draw itself is not part of the graph
    t = draw(shape);
  }
  tracer->add_random_input(t, draw);
  return t;
}

void detach(const Tensor &src, const Tensor &dst) {
  if (current) current->detach(src, dst);
}

bool lazy_value(const Tensor &t) { return current != nullptr && current->lazy() && current->computed(t); }

void checkpoint_begin() {
  if (current && current->lazy()) current->checkpoint_begin();
}

void checkpoint_end() {
  if (current && current->lazy()) current->checkpoint_end();
}

bool skip_compute() { return current != nullptr && current->lazy(); }

void read_data(const Tensor &t) {
  if (current && current->lazy() && current->computed(t)) current->graph_break("data read");
}

GraphBreak::GraphBreak(const char *op) {
  Tracer *tracer = current;
  if (!tracer) return;
  if (!tracer->lazy())
    throw GraphBreakError(std::string("kiln::compile: op '") + op +
                              "' cannot be captured into a compiled graph; kiln::compile splits the graph here "
                              "(a graph break) and runs it eagerly",
                          op);
  tracer->graph_break(op);  // the segment so far runs compiled; live tensors get values
  prev_ = tracer;
  current = nullptr;
  paused_ = true;  // the op runs eagerly in the user's grad mode (lazy recording keeps it)
}

GraphBreak::~GraphBreak() {
  if (!paused_) return;
  current = static_cast<Tracer *>(prev_);
}

}  // namespace kiln::trace
