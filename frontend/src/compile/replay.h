// compile/replay.h - eager replay of a recorded graph (graph-break
// segments): each node runs the eager op that recorded it.
#pragma once

#include <string>
#include <vector>

#include "kiln/ir/Graph.h"
#include "kiln/tensor.h"

namespace kiln::compile_detail {

/// Runs one node of a traced graph with the eager op that records it (the
/// graph-break segments are re-traced this way, with autograd, to get their
/// joint forward+backward graph). Constant nodes are made on `device`.
Tensor run_node(const ir::Node &n, const std::vector<Tensor> &in, const ir::Value &result, Device device = kCPU);

/// Replays `graph` with eager ops on `values` (its inputs already set);
/// detached values run as detach(), no_grad ones under NoGradGuard.
void replay_nodes(const ir::Graph &graph, const std::vector<int> &detached, const std::vector<int> &no_grad,
                  std::vector<Tensor> &values);

/// Gives a lazily recorded tensor its computed value. This is not an
/// in-place update of user data (the tensor had no value yet, or it is a view
/// of a real tensor and gets the values that tensor holds), so the version
/// of its storage stays: autograd's saved tensors that share it stay valid.
void assign_value(Tensor &holder, const Tensor &value);

/// For each output, which of `leaves` its autograd graph reaches (a walk of
/// the grad_fn edges down to the leaves' AccumulateGrad nodes).
std::vector<std::vector<bool>> gradient_reach(const std::vector<Tensor> &outputs, const std::vector<Tensor> &leaves);

/// A string that identifies a segment graph exactly (its guard).
std::string graph_signature(const ir::Graph &g);

/// What differs between two segment graphs recorded at the same position, in
/// words ("the constant of op 3 (kiln.mul operand) changed 0.5 -> 0.7",
/// "input 0 shape [4, 6] -> [5, 6]"); the first few differences.
std::string segment_change(const ir::Graph &old, const ir::Graph &now);

}  // namespace kiln::compile_detail
