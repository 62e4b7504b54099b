// kiln/ir/Graph.h - the plain-C++ graph that tracing produces.
//
// This header is the boundary between the frontend (which records what eager
// execution does) and the compiler (which turns it into the `kiln` MLIR
// dialect). It holds no MLIR types, so frontend code can build it freely.
//
// A Graph is a list of Nodes in execution (topological) order over numbered
// Values. Binary elementwise nodes always see operands of identical shape: the
// tracer records broadcasting as explicit Broadcast nodes, exactly as eager
// execution performs it (expand, then the same-shape kernel).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/OpTable.h"

namespace kiln::ir {

/// Element types a graph value can have. Bool is stored one byte per element.
enum class ElementType { F32, F16, BF16, I64, Bool, F64, I32 };

/// Comparison predicates for OpKind::Compare (ordered float / signed int).
enum class Predicate { EQ, NE, LT, LE, GT, GE };

/// The user-facing op a Gather node was traced from (Node::ints[1]): its
/// out-of-range error names that op, in eager and in every compiled call.
enum class IndexSource { Gather, IndexSelect, Embedding };

/// "gather", "index_select", "embedding" (inline: the eager library, which
/// links no ir/ library, names its errors with it).
inline const char *toString(IndexSource source) {
  switch (source) {
  case IndexSource::Gather:
    return "gather";
  case IndexSource::IndexSelect:
    return "index_select";
  case IndexSource::Embedding:
    return "embedding";
  }
  return "<unknown IndexSource>";
}

/// A tensor value: static shape and element type.
struct Value {
  std::vector<int64_t> shape;
  ElementType type = ElementType::F32;
};

/// One operation: operands and result are indices into Graph::values.
struct Node {
  OpKind kind;
  std::vector<int> operands;
  int result = -1;
  std::vector<int64_t> ints;  ///< permutation (Transpose), dims (Reduce*), conv/pool attributes, {dim, IndexSource} (Gather), {dim} (ScatterAdd) (Ops.def)
  bool keepdim = false;       ///< Reduce*
  double scalar = 0.0;        ///< Constant value; Pow exponent
  Predicate predicate = Predicate::EQ;  ///< Compare
  /// Recorded inside an op that eager autocast runs in float32 (softmax,
  /// layer_norm, their backwards, gradient accumulation): kiln-autocast
  /// computes it in float32 (GraphBuilder: attribute kiln.autocast_fp32).
  bool float32_scope = false;
};

/// How a graph input is fed.
enum class InputRole {
  Primal,   ///< a forward input (user input or captured parameter/tensor)
  Tangent,  ///< the gradient of a forward output (joint graphs only)
};

/// A joint forward+backward graph (AOTAutograd style) or a forward-only one.
/// outputs[0 .. num_forward_outputs) are the forward outputs; the rest are
/// gradients of the primal inputs that require grad, in order.
struct Graph {
  std::vector<Value> values;
  std::vector<int> inputs;
  std::vector<InputRole> input_roles;
  std::vector<Node> nodes;
  std::vector<int> outputs;
  int num_forward_outputs = 0;

  int addValue(std::vector<int64_t> shape, ElementType type) {
    values.push_back(Value{std::move(shape), type});
    return static_cast<int>(values.size()) - 1;
  }
};

const char *toString(OpKind kind);
const char *toString(ElementType type);

}  // namespace kiln::ir
