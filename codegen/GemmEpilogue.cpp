// GEMM epilogue matching (GemmEpilogue.h): a kiln.fusion computing
// act(matmul + broadcast(bias)) folded into the GEMM's store.
#include "GemmEpilogue.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace kiln::codegen {

using namespace mlir;

const char *gemmEpilogueName(GemmEpilogueKind kind) {
  switch (kind) {
  case GemmEpilogueKind::Bias:
    return "bias";
  case GemmEpilogueKind::BiasRelu:
    return "bias+relu";
  case GemmEpilogueKind::BiasGelu:
    return "bias+gelu";
  case GemmEpilogueKind::BiasGeluAux:
    return "bias+gelu+aux";
  case GemmEpilogueKind::Dgelu:
    return "dgelu";
  case GemmEpilogueKind::DgeluBgrad:
    return "dgelu+bgrad";
  }
  return "?";
}

bool readsGemmAux(GemmEpilogueKind kind) {
  return kind == GemmEpilogueKind::Dgelu || kind == GemmEpilogueKind::DgeluBgrad;
}

namespace {

/// `v` is a splat kiln.constant equal to `want` (to 1e-12 relative: the
/// trace stores sqrt(2/pi) as a double).
bool isConstant(Value v, double want) {
  auto c = v.getDefiningOp<ir::ConstantOp>();
  if (!c)
    return false;
  const double got = c.getValue().convertToDouble();
  return got == want || std::abs(got - want) <= 1e-12 * std::abs(want);
}

/// The operand of the binary `op` (of type Op) other than `one`, or null.
template <class Op> Value otherOperand(Value v, Value one) {
  auto op = v.getDefiningOp<Op>();
  if (!op)
    return {};
  if (op->getOperand(0) == one)
    return op->getOperand(1);
  if (op->getOperand(1) == one)
    return op->getOperand(0);
  return {};
}

/// `v` = Op(a, b) with {a, b} = {x, y} (commutative ops: either order).
template <class Op> bool isBinary(Value v, llvm::function_ref<bool(Value)> x, llvm::function_ref<bool(Value)> y) {
  auto op = v.getDefiningOp<Op>();
  if (!op)
    return false;
  Value a = op->getOperand(0), b = op->getOperand(1);
  return (x(a) && y(b)) || (x(b) && y(a));
}

/// z = ((t + (t * t * t) * 0.044715) * sqrt(2/pi)) * 2 (fused_gelu.cpp's twice_u).
bool isTwiceU(Value z, Value t) {
  constexpr double kSqrt2OverPi = 0.79788456080286535588, kCubic = 0.044715;
  auto is = [](Value want) { return [want](Value v) { return v == want; }; };
  auto constant = [](double c) { return [c](Value v) { return isConstant(v, c); }; };
  auto cube = [&](Value v) {
    return isBinary<ir::MulOp>(v, [&](Value sq) { return isBinary<ir::MulOp>(sq, is(t), is(t)); }, is(t));
  };
  auto inner = [&](Value v) {
    return isBinary<ir::AddOp>(v, is(t), [&](Value w) { return isBinary<ir::MulOp>(w, cube, constant(kCubic)); });
  };
  auto scaled = [&](Value v) { return isBinary<ir::MulOp>(v, inner, constant(kSqrt2OverPi)); };
  return isBinary<ir::MulOp>(z, scaled, constant(2.0));
}

/// s = select(z >= 0, 1, e) / (e + 1), e = exp(select(z >= 0, -z, z)): kiln::sigmoid's composite.
bool isSigmoidOfTwiceU(Value s, Value t) {
  auto div = s.getDefiningOp<ir::DivOp>();
  if (!div)
    return false;
  auto numerator = div.getOperand(0).getDefiningOp<ir::SelectOp>();
  if (!numerator || !isConstant(numerator->getOperand(1), 1.0))
    return false;
  Value e = numerator->getOperand(2);
  if (!isBinary<ir::AddOp>(div.getOperand(1), [&](Value v) { return v == e; },
                           [](Value v) { return isConstant(v, 1.0); }))
    return false;
  auto exp = e.getDefiningOp<ir::ExpOp>();
  auto arg = exp ? exp->getOperand(0).getDefiningOp<ir::SelectOp>() : nullptr;
  if (!arg || arg->getOperand(0) != numerator->getOperand(0))
    return false;
  auto cond = arg->getOperand(0).getDefiningOp<ir::CompareOp>();
  Value z = arg->getOperand(2);
  auto neg = arg->getOperand(1).getDefiningOp<ir::NegOp>();
  return cond && cond.getPredicate() == ir::ComparePredicate::ge && cond->getOperand(0) == z &&
         isConstant(cond->getOperand(1), 0.0) && neg && neg->getOperand(0) == z && isTwiceU(z, t);
}

FailureOr<GemmEpilogueKind> activationOf(Value y, Value t) {
  if (y == t)
    return GemmEpilogueKind::Bias;
  if (auto relu = y.getDefiningOp<ir::ReluOp>(); relu && relu->getOperand(0) == t)
    return GemmEpilogueKind::BiasRelu;
  Value s = otherOperand<ir::MulOp>(y, t);
  if (s && isSigmoidOfTwiceU(s, t))
    return GemmEpilogueKind::BiasGelu;
  return failure();
}

/// Hash-consed expression DAGs of one fusion body over two leaves: equal
/// ids mean the same expression (add and mul operands sorted; constants
/// keyed by 12 significant digits; compare keyed by its predicate).
class ExprTable {
public:
  int node(const std::string &op, std::vector<int> kids, bool commutative = false) {
    if (commutative)
      std::sort(kids.begin(), kids.end());
    auto [it, inserted] = ids_.try_emplace({op, std::move(kids)}, static_cast<int>(ids_.size()));
    return it->second;
  }
  int constant(double value) {
    char text[32];
    std::snprintf(text, sizeof(text), "c%.12g", value);
    return node(text, {});
  }

private:
  std::map<std::pair<std::string, std::vector<int>>, int> ids_;
};

/// The id of `v`'s expression over the leaves (-1: an op or argument the
/// DGELU form never has).
int exprOf(Value v, ExprTable &table, const llvm::DenseMap<Value, int> &leaves, llvm::DenseMap<Value, int> &memo) {
  if (auto it = leaves.find(v); it != leaves.end())
    return it->second;
  if (auto it = memo.find(v); it != memo.end())
    return it->second;
  Operation *op = v.getDefiningOp();
  int id = -1;
  if (auto c = dyn_cast_or_null<ir::ConstantOp>(op)) {
    id = table.constant(c.getValue().convertToDouble());
  } else if (op &&
             isa<ir::AddOp, ir::MulOp, ir::SubOp, ir::DivOp, ir::NegOp, ir::ExpOp, ir::SelectOp, ir::CompareOp>(op)) {
    std::vector<int> kids;
    for (Value operand : op->getOperands()) {
      kids.push_back(exprOf(operand, table, leaves, memo));
      if (kids.back() < 0)
        return memo[v] = -1;
    }
    std::string name = op->getName().getStringRef().str();
    if (auto cmp = dyn_cast<ir::CompareOp>(op))
      name += "." + std::to_string(static_cast<int>(cmp.getPredicate()));
    id = table.node(name, std::move(kids), isa<ir::AddOp, ir::MulOp>(op));
  }
  return memo[v] = id;
}

/// d = g * gelu'(x) as kiln's autodiff writes it for the traced composite
/// x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) (fused_gelu.cpp, the
/// sigmoid composite select(z >= 0, 1, e) / (e + 1), e = exp(-|z|)), the
/// ops of a canonicalized, CSE'd backward.
int dgeluExpr(ExprTable &t, int x, int g) {
  auto add = [&](int a, int b) { return t.node("kiln.add", {a, b}, true); };
  auto mul = [&](int a, int b) { return t.node("kiln.mul", {a, b}, true); };
  auto div = [&](int a, int b) { return t.node("kiln.div", {a, b}); };
  auto neg = [&](int a) { return t.node("kiln.neg", {a}); };
  auto select = [&](int c, int a, int b) { return t.node("kiln.select", {c, a, b}); };
  const int k = t.constant(0.044715), s = t.constant(0.79788456080286535588), two = t.constant(2.0),
            zero = t.constant(0.0), one = t.constant(1.0);
  const int x2 = mul(x, x);
  const int z = mul(mul(add(x, mul(mul(x2, x), k)), s), two);
  const int ge = t.node("kiln.compare." + std::to_string(static_cast<int>(ir::ComparePredicate::ge)), {z, zero});
  const int e = t.node("kiln.exp", {select(ge, neg(z), z)});
  const int num = select(ge, one, e), den = add(e, one);
  const int gx = mul(g, x);
  // d/dz of sigmoid(z) through the two branches of the select, times g x.
  const int dsig = mul(add(select(ge, zero, div(gx, den)), div(neg(mul(gx, num)), mul(den, den))), e);
  const int dz = mul(mul(add(select(ge, zero, dsig), neg(select(ge, dsig, zero))), two), s);
  const int dcube = mul(dz, k);
  const int dx3 = mul(mul(dcube, x), x);
  return add(add(add(add(mul(g, div(num, den)), dz), mul(dcube, x2)), dx3), dx3);
}

/// True when `v` = reduce_sum(d, [0]) : [N] with d [M, N].
bool isColumnSum(Value v, Value d) {
  auto sum = v.getDefiningOp<ir::ReduceSumOp>();
  if (!sum || sum->getOperand(0) != d)
    return false;
  ArrayRef<int64_t> dims = sum.getDims();
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return dims.size() == 1 && dims[0] == 0 && type && type.getRank() == 1;
}

/// The backward DGELU forms (matchGemmEpilogue).
FailureOr<GemmEpilogueMatch> matchDgelu(ir::FusionOp fusion, RankedTensorType type) {
  if (fusion.getInputs().size() != 2 || fusion.getNumResults() > 2)
    return failure();
  Block &body = fusion.getBodyBlock();
  Operation *yield = body.getTerminator();
  for (unsigned which : {0u, 1u}) {
    Value gValue = fusion.getInputs()[which], xValue = fusion.getInputs()[1 - which];
    auto matmul = gValue.getDefiningOp<ir::MatmulOp>();
    if (!matmul || !gValue.hasOneUse() || matmul.getType() != type || xValue.getType() != type)
      continue;
    ExprTable table;
    llvm::DenseMap<Value, int> leaves, memo;
    const int x = table.node("x", {}), g = table.node("g", {});
    leaves[body.getArgument(1 - which)] = x;
    leaves[body.getArgument(which)] = g;
    const int want = dgeluExpr(table, x, g);
    for (unsigned main = 0; main < yield->getNumOperands(); ++main) {
      Value d = yield->getOperand(main);
      if (d.getType() != type || exprOf(d, table, leaves, memo) != want)
        continue;
      if (yield->getNumOperands() == 1)
        return GemmEpilogueMatch{matmul, xValue, GemmEpilogueKind::Dgelu, main};
      if (isColumnSum(yield->getOperand(1 - main), d))
        return GemmEpilogueMatch{matmul, xValue, GemmEpilogueKind::DgeluBgrad, main};
    }
  }
  return failure();
}

/// The forward bias forms (matchGemmEpilogue).
FailureOr<GemmEpilogueMatch> matchBias(ir::FusionOp fusion, RankedTensorType type) {
  if (fusion.getInputs().size() != 2)
    return failure();
  Block &body = fusion.getBodyBlock();
  auto yield = body.getTerminator();
  // t = add(arg_matmul, arg_bias) is the first op reading the arguments.
  ir::AddOp add;
  for (Operation &op : body.without_terminator())
    if (auto a = dyn_cast<ir::AddOp>(op); a && isa<BlockArgument>(a.getOperand(0)) && isa<BlockArgument>(a.getOperand(1)))
      add = a;
  if (!add)
    return failure();
  // Every use of the arguments is the add (nothing else reads mm or the bias).
  for (BlockArgument arg : body.getArguments())
    for (Operation *user : arg.getUsers())
      if (user != add.getOperation())
        return failure();
  for (int which : {0, 1}) {
    auto mmArg = dyn_cast<BlockArgument>(add.getOperand(which));
    auto biasArg = dyn_cast<BlockArgument>(add.getOperand(1 - which));
    if (!mmArg || !biasArg || mmArg == biasArg)
      continue;
    Value mmValue = fusion.getInputs()[mmArg.getArgNumber()];
    Value biasValue = fusion.getInputs()[biasArg.getArgNumber()];
    auto matmul = mmValue.getDefiningOp<ir::MatmulOp>();
    auto broadcast = biasValue.getDefiningOp<ir::BroadcastOp>();
    if (!matmul || !broadcast || !mmValue.hasOneUse() || matmul.getType() != type)
      continue;
    auto biasType = dyn_cast<RankedTensorType>(broadcast.getInput().getType());
    if (!biasType || biasType.getRank() != 1 || biasType.getDimSize(0) != type.getDimSize(1) ||
        biasType.getElementType() != type.getElementType())
      continue;
    const Value t = add.getResult();
    if (yield->getNumOperands() == 1) {
      FailureOr<GemmEpilogueKind> kind = activationOf(yield->getOperand(0), t);
      if (failed(kind))
        return failure();
      return GemmEpilogueMatch{matmul, broadcast.getInput(), *kind, 0};
    }
    // {t, gelu(t)}: GELU_AUX_BIAS stores t as the aux output.
    for (unsigned main : {0u, 1u}) {
      FailureOr<GemmEpilogueKind> kind = activationOf(yield->getOperand(main), t);
      if (yield->getOperand(1 - main) == t && succeeded(kind) && *kind == GemmEpilogueKind::BiasGelu)
        return GemmEpilogueMatch{matmul, broadcast.getInput(), GemmEpilogueKind::BiasGeluAux, main};
    }
    return failure();
  }
  return failure();
}

} // namespace

FailureOr<GemmEpilogueMatch> matchGemmEpilogue(ir::FusionOp fusion) {
  if (fusion.getNumResults() < 1 || fusion.getNumResults() > 2)
    return failure();
  // The product's type [M, N]: every 2-D result ({t, gelu(t)}; {d, db} has a 1-D db).
  RankedTensorType type;
  for (Value r : fusion.getResults())
    if (auto rt = dyn_cast<RankedTensorType>(r.getType()); rt && rt.getRank() == 2) {
      if (type && rt != type)
        return failure();
      type = rt;
    }
  if (!type || type.getRank() != 2 || !type.getElementType().isF32())
    return failure();
  FailureOr<GemmEpilogueMatch> bias = matchBias(fusion, type);
  if (succeeded(bias))
    return bias;
  return matchDgelu(fusion, type);
}

} // namespace kiln::codegen
