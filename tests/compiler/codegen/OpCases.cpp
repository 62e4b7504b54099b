// The op-by-op conformance cases (OpCases.h).
#include "OpCases.h"

#include <cmath>

#include "GraphTestUtils.h"

namespace kiln::codegen_test {
namespace {

std::vector<float> positive(std::vector<float> v) {
  for (float &x : v) x = std::abs(x) + 0.5f;
  return v;
}

OpCase binary(OpKind kind) {
  GraphMaker m;
  int x = m.input({3, 4}), y = m.input({3, 4});
  return {m.done({m.same(kind, {x, y})}), {values(12, 1), values(12, 2)}};
}

OpCase unary(OpKind kind, bool positive_input = false) {
  GraphMaker m;
  int x = m.input({3, 4});
  return {m.done({m.same(kind, {x})}), {positive_input ? positive(values(12, 3)) : values(12, 3)}};
}

OpCase compare() {
  GraphMaker m;
  int x = m.input({3, 4}), y = m.input({3, 4});
  int c = m.node(OpKind::Compare, {x, y}, {3, 4}, ElementType::Bool, [](ir::Node &n) { n.predicate = ir::Predicate::LT; });
  return {m.done({c}), {values(12, 4), values(12, 5)}};
}

OpCase select() {
  GraphMaker m;
  int x = m.input({3, 4}), y = m.input({3, 4});
  int c = m.node(OpKind::Compare, {x, y}, {3, 4}, ElementType::Bool, [](ir::Node &n) { n.predicate = ir::Predicate::GT; });
  return {m.done({m.node(OpKind::Select, {c, x, y}, {3, 4})}), {values(12, 6), values(12, 7)}};
}

OpCase pow3() {
  GraphMaker m;
  int x = m.input({3, 4});
  return {m.done({m.node(OpKind::Pow, {x}, {3, 4}, ElementType::F32, [](ir::Node &n) { n.scalar = 3.0; })}),
          {values(12, 8)}};
}

OpCase convert() {
  GraphMaker m;
  int x = m.input({3, 4});
  return {m.done({m.node(OpKind::Convert, {x}, {3, 4}, ElementType::F64)}), {values(12, 9)}};
}

OpCase constant() {
  GraphMaker m;
  int x = m.input({3, 4});
  int c = m.constant({3, 4}, 0.75);
  return {m.done({m.same(OpKind::Mul, {x, c})}), {values(12, 10)}};
}

OpCase matmul() {
  GraphMaker m;
  int a = m.input({3, 4}), b = m.input({4, 5});
  return {m.done({m.node(OpKind::Matmul, {a, b}, {3, 5})}), {values(12, 11), values(20, 12)}};
}

OpCase batched_matmul() {
  GraphMaker m;
  int a = m.input({2, 3, 4}), b = m.input({2, 4, 5});
  return {m.done({m.node(OpKind::Matmul, {a, b}, {2, 3, 5})}), {values(24, 13), values(40, 14)}};
}

OpCase transpose() {
  GraphMaker m;
  int x = m.input({3, 4});
  int t = m.node(OpKind::Transpose, {x}, {4, 3}, ElementType::F32, [](ir::Node &n) { n.ints = {1, 0}; });
  return {m.done({m.same(OpKind::Neg, {t})}), {values(12, 15)}};
}

OpCase broadcast() {
  GraphMaker m;
  int b = m.input({4}), x = m.input({3, 4});
  return {m.done({m.same(OpKind::Add, {x, m.node(OpKind::Broadcast, {b}, {3, 4})})}), {values(4, 16), values(12, 17)}};
}

OpCase reshape() {
  GraphMaker m;
  int x = m.input({3, 4});
  return {m.done({m.same(OpKind::Exp, {m.node(OpKind::Reshape, {x}, {2, 6})})}), {values(12, 18)}};
}

OpCase reduce(OpKind kind) {
  GraphMaker m;
  int x = m.input({3, 4});
  return {m.done({m.reduce(kind, x, {1}, {3}), m.reduce(kind, x, {0}, {1, 4}, /*keepdim=*/true)}), {values(12, 19)}};
}

// ---- convolution and max pooling (extern steps) ----

/// Node::ints of a conv node: stride, padding, dilation, groups (Ops.def).
auto convAttrs(std::vector<int64_t> ints) {
  return [ints](ir::Node &n) { n.ints = ints; };
}
const std::vector<int64_t> kGroupedConv = {2, 1, 1, 0, 1, 2, 2}; // x [2, 4, 7, 8], w [6, 2, 3, 3] -> [2, 6, 4, 4]
const std::vector<int64_t> kPool = {3, 2, 2, 1, 1, 1};           // x [2, 3, 7, 6] -> [2, 3, 4, 7]

OpCase conv2d_plain() {
  GraphMaker m;
  int x = m.input({1, 3, 5, 5}), w = m.input({4, 3, 3, 3});
  return {m.done({m.node(OpKind::Conv2d, {x, w}, {1, 4, 5, 5}, ElementType::F32, convAttrs({1, 1, 1, 1, 1, 1, 1}))}),
          {values(75, 30), values(108, 31)}};
}

OpCase conv2d_grouped() {
  GraphMaker m;
  int x = m.input({2, 4, 7, 8}), w = m.input({6, 2, 3, 3});
  return {m.done({m.node(OpKind::Conv2d, {x, w}, {2, 6, 4, 4}, ElementType::F32, convAttrs(kGroupedConv))}),
          {values(448, 32), values(108, 33)}};
}

OpCase conv2d_input_grad() {
  GraphMaker m;
  int gy = m.input({2, 6, 4, 4}), w = m.input({6, 2, 3, 3});
  return {m.done({m.node(OpKind::Conv2dInputGrad, {gy, w}, {2, 4, 7, 8}, ElementType::F32, convAttrs(kGroupedConv))}),
          {values(192, 34), values(108, 35)}};
}

OpCase conv2d_weight_grad() {
  GraphMaker m;
  int x = m.input({2, 4, 7, 8}), gy = m.input({2, 6, 4, 4});
  return {m.done({m.node(OpKind::Conv2dWeightGrad, {x, gy}, {6, 2, 3, 3}, ElementType::F32, convAttrs(kGroupedConv))}),
          {values(448, 36), values(192, 37)}};
}

OpCase max_pool2d() {
  GraphMaker m;
  int x = m.input({2, 3, 7, 6});
  return {m.done({m.node(OpKind::MaxPool2d, {x}, {2, 3, 4, 7}, ElementType::F32, convAttrs(kPool))}), {values(252, 38)}};
}

OpCase max_pool2d_indices() {
  GraphMaker m;
  int x = m.input({2, 3, 7, 6});
  return {m.done({m.node(OpKind::MaxPool2dIndices, {x}, {2, 3, 4, 7}, ElementType::I64, convAttrs(kPool))}),
          {values(252, 39)}};
}

/// The backward (scatter) or gather with indices computed in the graph.
OpCase max_pool2d_moves(OpKind kind) {
  GraphMaker m;
  int x = m.input({2, 3, 7, 6});
  const bool scatter = kind == OpKind::MaxPool2dBackward;
  int g = m.input(scatter ? Shape{2, 3, 4, 7} : Shape{2, 3, 7, 6});
  int indices = m.node(OpKind::MaxPool2dIndices, {x}, {2, 3, 4, 7}, ElementType::I64, convAttrs(kPool));
  int out = m.node(kind, {g, indices}, scatter ? Shape{2, 3, 7, 6} : Shape{2, 3, 4, 7});
  return {m.done({out}), {values(252, 40), values(scatter ? 168 : 252, 41)}};
}

/// An int64 index of `shape` holding `values` (a float32 input converted
/// in the graph: the case inputs are float32 data).
int index_input(GraphMaker &m, const Shape &shape) {
  return m.node(OpKind::Convert, {m.input(shape)}, shape, ElementType::I64);
}

/// gather along dim 0 with a repeated index, then a pointwise consumer
/// (fused with the gather), and along dim 1.
OpCase gather() {
  GraphMaker m;
  int x = m.input({4, 3});
  int i0 = index_input(m, {2, 3}), i1 = index_input(m, {4, 2});
  int g0 = m.node(OpKind::Gather, {x, i0}, {2, 3}, ElementType::F32, [](ir::Node &n) { n.ints = {0, 0}; });
  int g1 = m.node(OpKind::Gather, {x, i1}, {4, 2}, ElementType::F32, [](ir::Node &n) { n.ints = {1, 2}; });
  return {m.done({m.same(OpKind::Exp, {g0}), g1}),
          {values(12, 20), {3, 0, 3, 1, 1, 2}, {2, 0, 1, 1, 0, 0, 2, 2}}};
}

/// scatter_add along dim 0 with repeated indices (they accumulate).
OpCase scatter_add() {
  GraphMaker m;
  int x = m.input({4, 3});
  int i = index_input(m, {3, 3});
  int src = m.input({3, 3});
  int r = m.node(OpKind::ScatterAdd, {x, i, src}, {4, 3}, ElementType::F32, [](ir::Node &n) { n.ints = {0}; });
  return {m.done({r}), {values(12, 21), {1, 1, 3, 1, 0, 3, 1, 2, 3}, values(9, 22)}};
}

/// kiln.argmax / kiln.argmin along dim 1 and (keepdim) dim 0, with a tie
/// and a NaN in the data (the first index of the extreme; NaN counts as it).
OpCase arg_reduce(OpKind kind) {
  GraphMaker m;
  int x = m.input({3, 4});
  int a = m.node(kind, {x}, {3}, ElementType::I64, [](ir::Node &n) { n.ints = {1}; });
  int b = m.node(kind, {x}, {1, 4}, ElementType::I64, [](ir::Node &n) {
    n.ints = {0};
    n.keepdim = true;
  });
  std::vector<float> data = values(12, 20);
  data[1] = data[2] = 7.0f; // a tie in row 0
  data[6] = NAN;            // a NaN in row 1 and column 2
  return {m.done({a, b}), {data}};
}

OpCase cumsum(int64_t dim) {
  GraphMaker m;
  int x = m.input({3, 4});
  return {m.done({m.node(OpKind::Cumsum, {x}, {3, 4}, ElementType::F32, [dim](ir::Node &n) { n.ints = {dim}; })}),
          {values(12, 21)}};
}

/// Divisors away from 0 (remainder, fmod, floor_div).
OpCase divide(OpKind kind) {
  GraphMaker m;
  int x = m.input({3, 4}), y = m.input({3, 4});
  std::vector<float> d = values(12, 22);
  for (float &v : d)
    v = v < 0 ? v - 0.5f : v + 0.5f;
  return {m.done({m.same(kind, {x, y})}), {values(12, 23), d}};
}

} // namespace

/// The cases, by op kind name (Ops.def's Kind column).
const std::map<std::string, std::vector<CaseBuilder>> &cases() {
  static const std::map<std::string, std::vector<CaseBuilder>> all = {
      {"Add", {[] { return binary(OpKind::Add); }}},
      {"Sub", {[] { return binary(OpKind::Sub); }}},
      {"Mul", {[] { return binary(OpKind::Mul); }}},
      {"Div", {[] { return binary(OpKind::Div); }}},
      {"Neg", {[] { return unary(OpKind::Neg); }}},
      {"Exp", {[] { return unary(OpKind::Exp); }}},
      {"Log", {[] { return unary(OpKind::Log, true); }}},
      {"Relu", {[] { return unary(OpKind::Relu); }}},
      {"Sqrt", {[] { return unary(OpKind::Sqrt, true); }}},
      {"Rsqrt", {[] { return unary(OpKind::Rsqrt, true); }}},
      {"Tanh", {[] { return unary(OpKind::Tanh); }}},
      {"Abs", {[] { return unary(OpKind::Abs); }}},
      {"Sin", {[] { return unary(OpKind::Sin); }}},
      {"Cos", {[] { return unary(OpKind::Cos); }}},
      {"Pow", {pow3}},
      {"Compare", {compare}},
      {"Select", {select}},
      {"Convert", {convert}},
      {"Constant", {constant}},
      {"Matmul", {matmul, batched_matmul}},
      {"Transpose", {transpose}},
      {"Broadcast", {broadcast}},
      {"Reshape", {reshape}},
      {"ReduceSum", {[] { return reduce(OpKind::ReduceSum); }}},
      {"ReduceMax", {[] { return reduce(OpKind::ReduceMax); }}},
      {"Conv2d", {conv2d_plain, conv2d_grouped}},
      {"Conv2dInputGrad", {conv2d_input_grad}},
      {"Conv2dWeightGrad", {conv2d_weight_grad}},
      {"MaxPool2d", {max_pool2d}},
      {"MaxPool2dIndices", {max_pool2d_indices}},
      {"MaxPool2dBackward", {[] { return max_pool2d_moves(OpKind::MaxPool2dBackward); }}},
      {"MaxPool2dGather", {[] { return max_pool2d_moves(OpKind::MaxPool2dGather); }}},
      {"Gather", {gather}},
      {"ScatterAdd", {scatter_add}},
      // issue 13, pointwise
      {"Erf", {[] { return unary(OpKind::Erf); }}},
      {"Floor", {[] { return unary(OpKind::Floor); }}},
      {"Ceil", {[] { return unary(OpKind::Ceil); }}},
      {"Round", {[] { return unary(OpKind::Round); }}},
      {"Trunc", {[] { return unary(OpKind::Trunc); }}},
      {"Maximum", {[] { return binary(OpKind::Maximum); }}},
      {"Minimum", {[] { return binary(OpKind::Minimum); }}},
      {"FloorDiv", {[] { return divide(OpKind::FloorDiv); }}},
      {"Remainder", {[] { return divide(OpKind::Remainder); }}},
      {"Fmod", {[] { return divide(OpKind::Fmod); }}},
      {"ReduceMin", {[] { return reduce(OpKind::ReduceMin); }}},
      {"ArgMax", {[] { return arg_reduce(OpKind::ArgMax); }}},
      {"ArgMin", {[] { return arg_reduce(OpKind::ArgMin); }}},
      {"Cumsum", {[] { return cumsum(1); }, [] { return cumsum(0); }}},
  };
  return all;
}

std::vector<OpKind> allOpKinds() {
  std::vector<OpKind> kinds;
  for (int k = 0; k < ir::kNumOpKinds; ++k) kinds.push_back(static_cast<OpKind>(k));
  return kinds;
}

} // namespace kiln::codegen_test
