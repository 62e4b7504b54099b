// GEMM epilogue matching (GemmEpilogue.h): a kiln.fusion computing
// act(matmul + broadcast(bias)) folded into the GEMM's store.
#include "GemmEpilogue.h"

#include <cmath>

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
  }
  return "?";
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

} // namespace

FailureOr<GemmEpilogueMatch> matchGemmEpilogue(ir::FusionOp fusion) {
  if (fusion.getNumResults() != 1 || fusion.getInputs().size() != 2)
    return failure();
  auto type = dyn_cast<RankedTensorType>(fusion.getResult(0).getType());
  if (!type || type.getRank() != 2 || !type.getElementType().isF32())
    return failure();
  Block &body = fusion.getBodyBlock();
  auto yield = body.getTerminator();
  if (yield->getNumOperands() != 1)
    return failure();
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
    FailureOr<GemmEpilogueKind> kind = activationOf(yield->getOperand(0), add.getResult());
    if (failed(kind))
      return failure();
    return GemmEpilogueMatch{matmul, broadcast.getInput(), *kind};
  }
  return failure();
}

} // namespace kiln::codegen
