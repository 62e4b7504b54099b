// Scalar bodies of the issue-13 elementwise ops (EmitOps.h): one element in
// arith/math ops, following PyTorch's CPU kernels so compiled and eager
// results agree bit for bit where the eager kernel is exact.
#include "EmitOps.h"

#include "kiln/ir/KilnOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

namespace kiln::codegen::cpu {

using namespace mlir;

namespace {

/// Small builders over one OpBuilder (the element type fixed per op).
struct Scalar {
  OpBuilder &b;
  Location loc;
  Type element;

  Value constant(double v) {
    if (isa<FloatType>(element))
      return b.create<arith::ConstantOp>(loc, b.getFloatAttr(element, v));
    return b.create<arith::ConstantOp>(loc, b.getIntegerAttr(element, static_cast<int64_t>(v)));
  }
  Value fcmp(arith::CmpFPredicate p, Value x, Value y) { return b.create<arith::CmpFOp>(loc, p, x, y); }
  Value icmp(arith::CmpIPredicate p, Value x, Value y) { return b.create<arith::CmpIOp>(loc, p, x, y); }
  Value select(Value c, Value x, Value y) { return b.create<arith::SelectOp>(loc, c, x, y); }
  Value isNaN(Value x) { return fcmp(arith::CmpFPredicate::UNO, x, x); }
  Value both(Value x, Value y) { return b.create<arith::AndIOp>(loc, x, y); }
  Value differ(Value x, Value y) { return b.create<arith::XOrIOp>(loc, x, y); }

  /// x < 0 (C semantics: false for NaN).
  Value negative(Value x) {
    if (isa<FloatType>(element))
      return fcmp(arith::CmpFPredicate::OLT, x, constant(0.0));
    return icmp(arith::CmpIPredicate::slt, x, constant(0.0));
  }
  /// x != 0 (C semantics: true for NaN).
  Value nonzero(Value x) {
    if (isa<FloatType>(element))
      return fcmp(arith::CmpFPredicate::UNE, x, constant(0.0));
    return icmp(arith::CmpIPredicate::ne, x, constant(0.0));
  }

  /// maximum (isMax) / minimum: NaN if either is NaN, else the larger /
  /// smaller, lhs on ties (the eager maximum_value / minimum_value).
  Value extreme(Value p, Value q, bool isMax) {
    if (!isa<FloatType>(element)) {
      Value qWins = icmp(isMax ? arith::CmpIPredicate::slt : arith::CmpIPredicate::sgt, p, q);
      return select(qWins, q, p);
    }
    Value qWins = fcmp(isMax ? arith::CmpFPredicate::OLT : arith::CmpFPredicate::OGT, p, q);
    Value r = select(qWins, q, p);
    r = select(isNaN(q), q, r);
    return select(isNaN(p), p, r);
  }

  /// fmod(a, b) (floats: C fmod; integers: the divisor d is never 0 here).
  Value rem(Value a, Value d) {
    if (isa<FloatType>(element))
      return b.create<arith::RemFOp>(loc, a, d);
    return b.create<arith::RemSIOp>(loc, a, d);
  }

  /// remainder from fmod: + d where mod != 0 and the signs of d and mod differ.
  Value pythonRemainder(Value a, Value d) {
    Value mod = rem(a, d);
    Value adjust = both(nonzero(mod), differ(negative(d), negative(mod)));
    Value shifted = isa<FloatType>(element) ? Value(b.create<arith::AddFOp>(loc, mod, d))
                                            : Value(b.create<arith::AddIOp>(loc, mod, d));
    return select(adjust, shifted, mod);
  }

  /// PyTorch's div_floor_floating (aten/src/ATen/native/BinaryOps.h).
  Value floorDivFloat(Value a, Value d) {
    Value mod = rem(a, d);
    Value div = b.create<arith::DivFOp>(loc, b.create<arith::SubFOp>(loc, a, mod), d);
    Value adjust = both(nonzero(mod), differ(negative(d), negative(mod)));
    div = select(adjust, b.create<arith::SubFOp>(loc, div, constant(1.0)), div);
    Value floored = b.create<math::FloorOp>(loc, div);
    Value roundUp = fcmp(arith::CmpFPredicate::OGT, b.create<arith::SubFOp>(loc, div, floored), constant(0.5));
    floored = select(roundUp, b.create<arith::AddFOp>(loc, floored, constant(1.0)), floored);
    Value quotient = b.create<arith::DivFOp>(loc, a, d);
    Value signedZero = b.create<math::CopySignOp>(loc, constant(0.0), quotient);
    Value r = select(nonzero(div), floored, signedZero);
    return select(fcmp(arith::CmpFPredicate::OEQ, d, constant(0.0)), quotient, r);
  }

  /// div_floor_integer: the truncated quotient minus 1 where the remainder
  /// is nonzero and the signs differ.
  Value floorDivInt(Value a, Value d) {
    Value quot = b.create<arith::DivSIOp>(loc, a, d);
    Value adjust = both(nonzero(rem(a, d)), differ(negative(a), negative(d)));
    return select(adjust, b.create<arith::SubIOp>(loc, quot, constant(1.0)), quot);
  }

  /// For integers: f(a, d) with d = 1 where b is 0, and 0 there (no trap).
  template <class F> Value guarded(Value a, Value d, F f) {
    if (isa<FloatType>(element))
      return f(a, d);
    Value zero = constant(0.0);
    Value isZero = icmp(arith::CmpIPredicate::eq, d, zero);
    Value safe = select(isZero, constant(1.0), d);
    return select(isZero, zero, f(a, safe));
  }
};

} // namespace

bool hasScalarBody(Operation *op) {
  return isa<ir::ErfOp, ir::FloorOp, ir::CeilOp, ir::RoundOp, ir::TruncOp, ir::MaximumOp, ir::MinimumOp, ir::FloorDivOp,
             ir::RemainderOp, ir::FmodOp>(op);
}

Value emitIntegerDivide(OpBuilder &b, Location loc, Value a, Value d) {
  Scalar s{b, loc, a.getType()};
  return s.guarded(a, d, [&](Value x, Value y) -> Value { return b.create<arith::DivSIOp>(loc, x, y); });
}

Value emitScalarOp(Operation *op, OpBuilder &b, Location loc, ValueRange args, Type element) {
  Scalar s{b, loc, element};
  const bool isFloat = isa<FloatType>(element);
  // Rounding is the identity on integers.
  if (isa<ir::FloorOp, ir::CeilOp, ir::RoundOp, ir::TruncOp>(op) && !isFloat)
    return args[0];
  if (isa<ir::ErfOp>(op))
    return b.create<math::ErfOp>(loc, args[0]);
  if (isa<ir::FloorOp>(op))
    return b.create<math::FloorOp>(loc, args[0]);
  if (isa<ir::CeilOp>(op))
    return b.create<math::CeilOp>(loc, args[0]);
  if (isa<ir::RoundOp>(op))
    return b.create<math::RoundEvenOp>(loc, args[0]);
  if (isa<ir::TruncOp>(op))
    return b.create<math::TruncOp>(loc, args[0]);
  if (isa<ir::MaximumOp, ir::MinimumOp>(op))
    return s.extreme(args[0], args[1], isa<ir::MaximumOp>(op));
  if (isa<ir::FloorDivOp>(op))
    return s.guarded(args[0], args[1],
                     [&](Value a, Value d) { return isFloat ? s.floorDivFloat(a, d) : s.floorDivInt(a, d); });
  if (isa<ir::RemainderOp>(op))
    return s.guarded(args[0], args[1], [&](Value a, Value d) { return s.pythonRemainder(a, d); });
  if (isa<ir::FmodOp>(op))
    return s.guarded(args[0], args[1], [&](Value a, Value d) { return s.rem(a, d); });
  return Value();
}

} // namespace kiln::codegen::cpu
