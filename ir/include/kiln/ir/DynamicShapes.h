// kiln/ir/DynamicShapes.h - one dynamic dimension in a traced Graph
// (automatic dynamic shapes, as torch._dynamo's automatic_dynamic_shapes).
//
// Tracing records concrete sizes. When a compiled module is called again
// with one input dimension changed, Kiln has two traces of the same program
// at two sizes s_a and s_b of that dimension. fitSymbolicGraph() checks that
// they have the same structure and explains every number that differs as a
// monomial c * s^p of the symbol s:
//   - value dims: integers, p in {1, 2} (a batch dim B, a flattened B*T with
//     T static, an attention matrix T*T);
//   - node scalars (constants, e.g. a mean's 1/N): c * s^p, p in {-2, -1, 1, 2}.
// Numbers equal in both traces are static. Anything else (an affine size
// such as s + 1, different ops, a captured tensor whose shape depends on s)
// makes the fit fail with a reason, and the caller keeps static shapes.
//
// instantiate() rebuilds the concrete Graph for any size s >= 2 without
// tracing again. Two samples cannot tell a monomial from every other
// function, so a fit is a hypothesis: the compiler's verifiers check each
// instantiated graph (shapes of every op), and a failure falls back to
// tracing at that size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/Graph.h"

namespace kiln::ir {

/// coeff * s^power; power 0 is a plain number (coeff).
struct SymbolicNumber {
  double coeff = 0.0;
  int power = 0;
  bool isStatic() const { return power == 0; }
  /// The value at symbol `s`.
  double at(int64_t s) const;
};

/// A Graph whose numbers are functions of one symbol s.
struct SymbolicGraph {
  Graph graph;                                    ///< structure, at `example_size`
  int64_t example_size = 0;                       ///< s of `graph`
  std::vector<std::vector<SymbolicNumber>> dims;  ///< per value, per dim
  std::vector<SymbolicNumber> scalars;            ///< per node: Node::scalar
  /// Values (by id) whose shape depends on s.
  bool isDynamic(int value) const;
  /// "s" or "64*s" or "s^2" for dim `d` of `value`, or the number.
  std::string dimString(int value, int d) const;
};

/// Fits `a` (traced at s = sa) and `b` (the same program at s = sb, sa != sb,
/// both >= 2) to one SymbolicGraph. Returns false with `*why` set when the
/// traces differ in structure or a number is not a monomial of s.
bool fitSymbolicGraph(const Graph &a, int64_t sa, const Graph &b, int64_t sb, SymbolicGraph *out, std::string *why);

/// The concrete graph at symbol value `s` (>= 1).
Graph instantiate(const SymbolicGraph &g, int64_t s);

}  // namespace kiln::ir
