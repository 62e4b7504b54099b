// Fitting two traces to a graph with one symbolic dimension (DynamicShapes.h).
#include "kiln/ir/DynamicShapes.h"

#include <cmath>
#include <sstream>

namespace kiln::ir {

namespace {

double ipow(double x, int p) {
  double r = 1.0;
  for (int i = 0; i < std::abs(p); ++i) r *= x;
  return p < 0 ? 1.0 / r : r;
}

/// An integer dim: c * s^p with p in {1, 2} and integer c >= 1.
bool fitDim(int64_t a, int64_t sa, int64_t b, int64_t sb, SymbolicNumber *out) {
  if (a == b) {
    *out = {static_cast<double>(a), 0};
    return true;
  }
  for (int p : {1, 2}) {
    const int64_t pa = p == 1 ? sa : sa * sa, pb = p == 1 ? sb : sb * sb;
    if (a % pa != 0) continue;
    const int64_t c = a / pa;
    if (c >= 1 && c * pb == b) {
      *out = {static_cast<double>(c), p};
      return true;
    }
  }
  return false;
}

/// A real scalar: c * s^p with p in {-2, -1, 1, 2}, to 1e-6 relative (the
/// frontend may have rounded it to the tensor's dtype).
bool fitScalar(double a, int64_t sa, double b, int64_t sb, SymbolicNumber *out) {
  if (a == b || (std::isnan(a) && std::isnan(b))) {
    *out = {a, 0};
    return true;
  }
  if (!std::isfinite(a) || !std::isfinite(b) || a == 0.0 || b == 0.0) return false;
  for (int p : {-1, 1, -2, 2}) {
    const double c = a / ipow(static_cast<double>(sa), p);
    const double predicted = c * ipow(static_cast<double>(sb), p);
    if (std::fabs(predicted - b) <= 1e-6 * std::fabs(b)) {
      *out = {c, p};
      return true;
    }
  }
  return false;
}

std::string shapeString(const std::vector<int64_t> &s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

}  // namespace

double SymbolicNumber::at(int64_t s) const { return power == 0 ? coeff : coeff * ipow(static_cast<double>(s), power); }

bool SymbolicGraph::isDynamic(int value) const {
  for (const SymbolicNumber &d : dims.at(value))
    if (!d.isStatic()) return true;
  return false;
}

std::string SymbolicGraph::dimString(int value, int d) const {
  const SymbolicNumber &n = dims.at(value).at(d);
  std::ostringstream os;
  if (n.isStatic()) {
    os << static_cast<int64_t>(n.coeff);
    return os.str();
  }
  if (n.coeff != 1.0) os << static_cast<int64_t>(n.coeff) << "*";
  os << "s";
  if (n.power != 1) os << "^" << n.power;
  return os.str();
}

bool fitSymbolicGraph(const Graph &a, int64_t sa, const Graph &b, int64_t sb, SymbolicGraph *out, std::string *why) {
  auto fail = [&](const std::string &message) {
    if (why) *why = message;
    return false;
  };
  if (sa == sb || sa < 2 || sb < 2)
    return fail("sizes " + std::to_string(sa) + " and " + std::to_string(sb) +
                " cannot define a dynamic dimension (need two different sizes >= 2)");
  if (a.values.size() != b.values.size() || a.nodes.size() != b.nodes.size() || a.inputs != b.inputs ||
      a.input_roles != b.input_roles || a.outputs != b.outputs || a.num_forward_outputs != b.num_forward_outputs)
    return fail("the two traces record different graphs (" + std::to_string(a.nodes.size()) + " vs " +
                std::to_string(b.nodes.size()) + " ops)");
  SymbolicGraph g;
  g.graph = a;
  g.example_size = sa;
  g.dims.resize(a.values.size());
  for (size_t v = 0; v < a.values.size(); ++v) {
    const Value &va = a.values[v], &vb = b.values[v];
    if (va.type != vb.type || va.shape.size() != vb.shape.size())
      return fail("value %" + std::to_string(v) + " has a different type or rank in the two traces");
    for (size_t d = 0; d < va.shape.size(); ++d) {
      SymbolicNumber n;
      if (!fitDim(va.shape[d], sa, vb.shape[d], sb, &n))
        return fail("value %" + std::to_string(v) + " has shape " + shapeString(va.shape) + " at s=" +
                    std::to_string(sa) + " but " + shapeString(vb.shape) + " at s=" + std::to_string(sb) +
                    ": dim " + std::to_string(d) + " is not c*s or c*s^2");
      g.dims[v].push_back(n);
    }
  }
  g.scalars.resize(a.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const Node &na = a.nodes[i], &nb = b.nodes[i];
    if (na.kind != nb.kind || na.operands != nb.operands || na.result != nb.result || na.ints != nb.ints ||
        na.keepdim != nb.keepdim || na.predicate != nb.predicate)
      return fail(std::string("op ") + std::to_string(i) + " differs between the traces (" + toString(na.kind) +
                  " vs " + toString(nb.kind) + ")");
    if (!fitScalar(na.scalar, sa, nb.scalar, sb, &g.scalars[i]))
      return fail(std::string("the scalar of op ") + std::to_string(i) + " (" + toString(na.kind) + ") is " +
                  std::to_string(na.scalar) + " at s=" + std::to_string(sa) + " but " + std::to_string(nb.scalar) +
                  " at s=" + std::to_string(sb) + ": not c*s^p");
    if (na.kind == OpKind::Pow && !g.scalars[i].isStatic())
      return fail("a pow exponent depends on the dynamic size");
  }
  *out = std::move(g);
  return true;
}

Graph instantiate(const SymbolicGraph &g, int64_t s) {
  Graph out = g.graph;
  for (size_t v = 0; v < out.values.size(); ++v)
    for (size_t d = 0; d < out.values[v].shape.size(); ++d)
      out.values[v].shape[d] = static_cast<int64_t>(std::llround(g.dims[v][d].at(s)));
  for (size_t i = 0; i < out.nodes.size(); ++i) out.nodes[i].scalar = g.scalars[i].at(s);
  return out;
}

}  // namespace kiln::ir
