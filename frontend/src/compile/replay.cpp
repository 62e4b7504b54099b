// compile/replay.cpp - eager replay of recorded graphs and the segment
// signatures of graph breaks.
#include <algorithm>
#include <set>
#include <sstream>

#include "compile/replay.h"
#include "compile/tracer.h"
#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "nn/conv_internal.h"
#include "ops/gather.h"

namespace kiln::compile_detail {

/// The conv and max pool nodes (attributes in Node::ints, Ops.def) with
/// the primitives that record them (nn/conv_internal.h).
static Tensor run_conv_node(const ir::Node &n, const std::vector<Tensor> &in, const ir::Value &result) {
  const std::vector<int64_t> &v = n.ints;
  if (n.kind == ir::OpKind::MaxPool2dBackward) return nn::detail::max_pool2d_scatter(in[0], in[1], result.shape);
  if (n.kind == ir::OpKind::MaxPool2dGather) return nn::detail::max_pool2d_gather(in[0], in[1]);
  if (n.kind == ir::OpKind::MaxPool2d || n.kind == ir::OpKind::MaxPool2dIndices) {
    const nn::detail::PoolParams p{{v.at(0), v.at(1)}, {v.at(2), v.at(3)}, {v.at(4), v.at(5)}};
    return n.kind == ir::OpKind::MaxPool2d ? nn::detail::max_pool2d_values(in[0], p)
                                           : nn::detail::max_pool2d_indices(in[0], p);
  }
  const nn::detail::ConvParams p{{v.at(0), v.at(1)}, {v.at(2), v.at(3)}, {v.at(4), v.at(5)}, v.at(6)};
  if (n.kind == ir::OpKind::Conv2dInputGrad) return nn::detail::conv2d_input_grad(in[0], in[1], result.shape, p);
  if (n.kind == ir::OpKind::Conv2dWeightGrad) return nn::detail::conv2d_weight_grad(in[0], in[1], result.shape, p);
  return nn::detail::conv2d_forward(in[0], in[1], p);
}

/// Runs one node of a traced graph with the eager op that records it (the
/// graph-break segments are re-traced this way, with autograd, to get their
/// joint forward+backward graph).
Tensor run_node(const ir::Node &n, const std::vector<Tensor> &in, const ir::Value &result, Device device) {
  trace::Float32Scope scope(n.float32_scope);  // re-recorded nodes (and their backward) keep the mark
  switch (n.kind) {
  case ir::OpKind::Add: return in[0] + in[1];
  case ir::OpKind::Sub: return in[0] - in[1];
  case ir::OpKind::Mul: return in[0] * in[1];
  case ir::OpKind::Div: return in[0].is_floating_point() ? in[0] / in[1] : div(in[0], in[1], "trunc");  // ints: C division
  case ir::OpKind::Neg: return neg(in[0]);
  case ir::OpKind::Exp: return exp(in[0]);
  case ir::OpKind::Log: return log(in[0]);
  case ir::OpKind::Relu: return relu(in[0]);
  case ir::OpKind::Sqrt: return sqrt(in[0]);
  case ir::OpKind::Rsqrt: return rsqrt(in[0]);
  case ir::OpKind::Tanh: return tanh(in[0]);
  case ir::OpKind::Abs: return abs(in[0]);
  case ir::OpKind::Sin: return sin(in[0]);
  case ir::OpKind::Cos: return cos(in[0]);
  case ir::OpKind::Pow: return pow(in[0], n.scalar);
  case ir::OpKind::Compare:
    switch (n.predicate) {
    case ir::Predicate::EQ: return eq(in[0], in[1]);
    case ir::Predicate::NE: return ne(in[0], in[1]);
    case ir::Predicate::LT: return lt(in[0], in[1]);
    case ir::Predicate::LE: return le(in[0], in[1]);
    case ir::Predicate::GT: return gt(in[0], in[1]);
    case ir::Predicate::GE: return ge(in[0], in[1]);
    }
    break;
  case ir::OpKind::Select: return where(in[0], in[1], in[2]);
  case ir::OpKind::Convert: return in[0].to(trace::dtype_of(result.type));
  case ir::OpKind::Constant: return full(result.shape, n.scalar, trace::dtype_of(result.type), device);
  case ir::OpKind::Matmul: return in[0].dim() == 3 ? bmm(in[0], in[1]) : matmul(in[0], in[1]);
  case ir::OpKind::Transpose: return in[0].permute(n.ints);
  case ir::OpKind::Broadcast: return in[0].expand(result.shape);
  case ir::OpKind::Reshape: return in[0].reshape(result.shape);
  case ir::OpKind::ReduceSum: return sum(in[0], n.ints, n.keepdim);
  case ir::OpKind::ReduceMax: return amax(in[0], n.ints, n.keepdim);
  case ir::OpKind::Conv2d:
  case ir::OpKind::Conv2dInputGrad:
  case ir::OpKind::Conv2dWeightGrad:
  case ir::OpKind::MaxPool2d:
  case ir::OpKind::MaxPool2dIndices:
  case ir::OpKind::MaxPool2dBackward:
  case ir::OpKind::MaxPool2dGather: return run_conv_node(n, in, result);
  case ir::OpKind::Gather: return detail::gather_as(in[0], n.ints[0], in[1], static_cast<ir::IndexSource>(n.ints[1]));
  case ir::OpKind::ScatterAdd: return scatter_add(in[0], n.ints[0], in[1], in[2]);
  // issue 13, pointwise
  case ir::OpKind::Erf: return erf(in[0]);
  case ir::OpKind::Floor: return floor(in[0]);
  case ir::OpKind::Ceil: return ceil(in[0]);
  case ir::OpKind::Round: return round(in[0]);
  case ir::OpKind::Trunc: return trunc(in[0]);
  case ir::OpKind::Maximum: return maximum(in[0], in[1]);
  case ir::OpKind::Minimum: return minimum(in[0], in[1]);
  case ir::OpKind::FloorDiv: return floor_divide(in[0], in[1]);
  case ir::OpKind::Remainder: return remainder(in[0], in[1]);
  case ir::OpKind::Fmod: return fmod(in[0], in[1]);
  case ir::OpKind::ReduceMin: return amin(in[0], n.ints, n.keepdim);
  case ir::OpKind::ArgMax: return argmax(in[0], n.ints.at(0), n.keepdim);
  case ir::OpKind::ArgMin: return argmin(in[0], n.ints.at(0), n.keepdim);
  case ir::OpKind::Cumsum: return cumsum(in[0], n.ints.at(0));
  }
  throw Error(std::string("kiln::compile: graph-break segment: cannot replay op ") + ir::toString(n.kind));
}

/// Gives a lazily recorded tensor its computed value. This is not an
/// in-place update of user data (the tensor had no value yet, or it is a view
/// of a real tensor and gets the values that tensor holds), so the version
/// of its storage stays: autograd's saved tensors that share it stay valid.
void assign_value(Tensor &holder, const Tensor &value) {
  auto &version = holder.impl()->storage->version;
  const uint64_t before = version.load();
  holder.copy_(value);
  version.store(before);
}

/// For each output, which of `leaves` its autograd graph reaches (a walk of
/// the grad_fn edges down to the leaves' AccumulateGrad nodes).
std::vector<std::vector<bool>> gradient_reach(const std::vector<Tensor> &outputs, const std::vector<Tensor> &leaves) {
  std::vector<const autograd::Node *> accumulators;
  for (const Tensor &leaf : leaves) accumulators.push_back(autograd::grad_accumulator(leaf).get());
  std::vector<std::vector<bool>> reach;
  for (const Tensor &out : outputs) {
    std::vector<bool> row(leaves.size(), false);
    std::vector<const autograd::Node *> stack;
    std::set<const autograd::Node *> seen;
    if (auto edge = autograd::gradient_edge(out); edge.valid()) stack.push_back(edge.fn.get());
    while (!stack.empty()) {
      const autograd::Node *n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (size_t i = 0; i < accumulators.size(); ++i)
        if (accumulators[i] == n) row[i] = true;
      for (const autograd::Edge &e : n->next_edges)
        if (e.valid()) stack.push_back(e.fn.get());
    }
    reach.push_back(std::move(row));
  }
  return reach;
}

/// A string that identifies a segment graph exactly (its guard).
std::string graph_signature(const ir::Graph &g) {
  std::ostringstream os;
  os << std::hexfloat;
  for (const auto &v : g.values) {
    os << static_cast<int>(v.type) << "[";
    for (int64_t d : v.shape) os << d << ",";
    os << "]";
  }
  os << "|";
  for (const auto &n : g.nodes) {
    os << static_cast<int>(n.kind) << "(";
    for (int o : n.operands) os << o << ",";
    os << ")" << n.result << "{";
    for (int64_t i : n.ints) os << i << ",";
    os << "}" << n.keepdim << n.scalar << static_cast<int>(n.predicate) << ";";
  }
  os << "|";
  for (int i : g.inputs) os << i << ",";
  os << "|";
  for (int o : g.outputs) os << o << ",";
  return os.str();
}

/// Replays `graph` with eager ops on `values` (its inputs already set);
/// detached values run as detach(), no_grad ones under NoGradGuard.
void replay_nodes(const ir::Graph &graph, const std::vector<int> &detached, const std::vector<int> &no_grad,
                  std::vector<Tensor> &values) {
  auto contains = [](const std::vector<int> &ids, int id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); };
  Device device = kCPU;  // where constants are made: the inputs' device
  for (int i : graph.inputs)
    if (values[i].defined()) {
      device = values[i].device();
      break;
    }
  for (const ir::Node &n : graph.nodes) {
    std::vector<Tensor> operands;
    for (int o : n.operands) operands.push_back(values[o]);
    if (contains(detached, n.result)) {
      values[n.result] = operands[0].detach();
    } else if (contains(no_grad, n.result)) {
      NoGradGuard guard;
      values[n.result] = run_node(n, operands, graph.values[n.result], device);
    } else {
      values[n.result] = run_node(n, operands, graph.values[n.result], device);
    }
  }
}

/// What differs between two segment graphs recorded at the same position, in
/// words ("the constant of op 3 (kiln.mul operand) changed 0.5 -> 0.7",
/// "input 0 shape [4, 6] -> [5, 6]"); the first few differences.
std::string segment_change(const ir::Graph &old, const ir::Graph &now) {
  std::vector<std::string> changes;
  const size_t shared_inputs = std::min(old.inputs.size(), now.inputs.size());
  for (size_t i = 0; i < shared_inputs; ++i) {
    const ir::Value &a = old.values[old.inputs[i]], &b = now.values[now.inputs[i]];
    if (a.shape != b.shape) changes.push_back("input " + std::to_string(i) + " shape " + shape_str(a.shape) + " -> " +
                                              shape_str(b.shape));
    if (a.type != b.type) changes.push_back("input " + std::to_string(i) + " dtype " + ir::toString(a.type) +
                                            " -> " + ir::toString(b.type));
  }
  if (old.inputs.size() != now.inputs.size())
    changes.push_back(std::to_string(now.inputs.size()) + " inputs (was " + std::to_string(old.inputs.size()) + ")");
  if (old.nodes.size() != now.nodes.size())
    changes.push_back(std::to_string(now.nodes.size()) + " ops (was " + std::to_string(old.nodes.size()) + ")");
  const size_t shared_nodes = std::min(old.nodes.size(), now.nodes.size());
  for (size_t i = 0; i < shared_nodes && changes.size() < 4; ++i) {
    const ir::Node &a = old.nodes[i], &b = now.nodes[i];
    const std::string op = "op " + std::to_string(i) + " (" + ir::toString(b.kind) + ")";
    if (a.kind != b.kind) {
      changes.push_back("op " + std::to_string(i) + " is " + ir::toString(b.kind) + " (was " + ir::toString(a.kind) + ")");
      break;  // the rest is shifted
    }
    if (a.scalar != b.scalar) {
      std::ostringstream os;
      os << "the constant of " << op << " changed " << a.scalar << " -> " << b.scalar
         << " (a host value, e.g. from item(), baked into the graph; pass it as a tensor instead)";
      changes.push_back(os.str());
    }
    if (a.ints != b.ints || a.keepdim != b.keepdim || a.predicate != b.predicate)
      changes.push_back("the attributes of " + op + " changed");
    if (old.values[a.result].shape != now.values[b.result].shape)
      changes.push_back("the result shape of " + op + " " + shape_str(old.values[a.result].shape) + " -> " +
                        shape_str(now.values[b.result].shape));
  }
  if (changes.empty()) return "which inputs require grad, the detached values or the outputs changed";
  std::string out;
  for (size_t i = 0; i < changes.size(); ++i) out += (i ? "; " : "") + changes[i];
  return out;
}

}  // namespace kiln::compile_detail
