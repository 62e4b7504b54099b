// kiln.argmax / kiln.argmin and kiln.cumsum as linalg on tensors
// (EmitOps.h).
#include "EmitOps.h"

#include <cmath>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace kiln::codegen::cpu {

using namespace mlir;

namespace {

bool isLowFloat(Type t) { return t.isBF16() || t.isF16(); }

/// `v` widened to f32 when it is bf16/f16 (exact).
Value widen(OpBuilder &b, Location loc, Value v) {
  if (isLowFloat(v.getType()))
    return b.create<arith::ExtFOp>(loc, b.getF32Type(), v);
  return v;
}

/// The affine map (d0..d{rank-1}) -> (the dims other than `dim`).
AffineMap keptDims(MLIRContext *ctx, int64_t rank, int64_t dim) {
  SmallVector<AffineExpr> kept;
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim)
      kept.push_back(getAffineDimExpr(d, ctx));
  return AffineMap::get(rank, 0, kept, ctx);
}

/// A tensor of `input`'s shape without `dim`, element `element`, filled with `value`.
Value filledLine(OpBuilder &b, Location loc, Value input, int64_t dim, Type element, TypedAttr value) {
  auto type = cast<RankedTensorType>(input.getType());
  SmallVector<int64_t> shape;
  SmallVector<Value> dynamic;
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (d == dim)
      continue;
    shape.push_back(type.getDimSize(d));
    if (type.isDynamicDim(d))
      dynamic.push_back(b.create<tensor::DimOp>(loc, input, d));
  }
  Value empty = b.create<tensor::EmptyOp>(loc, shape, element, dynamic);
  Value start = b.create<arith::ConstantOp>(loc, value);
  return b.create<linalg::FillOp>(loc, ValueRange{start}, ValueRange{empty}).getResult(0);
}

/// The max (isMax) / min of each line along `dim`, NaN propagating
/// (arith.maximumf / minimumf), in the compute element type.
Value lineExtreme(OpBuilder &b, Location loc, Value input, int64_t dim, bool isMax) {
  MLIRContext *ctx = b.getContext();
  auto type = cast<RankedTensorType>(input.getType());
  Type element = isLowFloat(type.getElementType()) ? b.getF32Type() : type.getElementType();
  const bool isFloat = isa<FloatType>(element);
  const unsigned width = element.getIntOrFloatBitWidth();
  TypedAttr start = isFloat ? TypedAttr(b.getFloatAttr(element, isMax ? -INFINITY : INFINITY))
                            : TypedAttr(b.getIntegerAttr(element, isMax ? APInt::getSignedMinValue(width)
                                                                        : APInt::getSignedMaxValue(width)));
  Value init = filledLine(b, loc, input, dim, element, start);
  const int64_t rank = type.getRank();
  SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
  iterators[dim] = utils::IteratorType::reduction;
  SmallVector<AffineMap> maps = {AffineMap::getMultiDimIdentityMap(rank, ctx), keptDims(ctx, rank, dim)};
  return b
      .create<linalg::GenericOp>(loc, TypeRange{init.getType()}, ValueRange{input}, ValueRange{init}, maps, iterators,
                                 [&](OpBuilder &nb, Location nl, ValueRange a) {
                                   Value x = widen(nb, nl, a[0]);
                                   Value r;
                                   if (isFloat)
                                     r = isMax ? Value(nb.create<arith::MaximumFOp>(nl, x, a[1]))
                                               : Value(nb.create<arith::MinimumFOp>(nl, x, a[1]));
                                   else
                                     r = isMax ? Value(nb.create<arith::MaxSIOp>(nl, x, a[1]))
                                               : Value(nb.create<arith::MinSIOp>(nl, x, a[1]));
                                   nb.create<linalg::YieldOp>(nl, r);
                                 })
      .getResult(0);
}

} // namespace

Value emitArgReduction(OpBuilder &b, Location loc, Value input, int64_t dim, bool isMax) {
  MLIRContext *ctx = b.getContext();
  Value extreme = lineExtreme(b, loc, input, dim, isMax);
  Type i64 = b.getI64Type();
  Value init = filledLine(b, loc, input, dim, i64, b.getI64IntegerAttr(INT64_MAX));
  const int64_t rank = cast<RankedTensorType>(input.getType()).getRank();
  SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
  iterators[dim] = utils::IteratorType::reduction;
  AffineMap kept = keptDims(ctx, rank, dim);
  SmallVector<AffineMap> maps = {AffineMap::getMultiDimIdentityMap(rank, ctx), kept, kept};
  auto body = [&](OpBuilder &nb, Location nl, ValueRange a) {
    Value x = widen(nb, nl, a[0]);
    Value hit;
    if (isa<FloatType>(x.getType())) {
      Value equal = nb.create<arith::CmpFOp>(nl, arith::CmpFPredicate::OEQ, x, a[1]);
      Value nan = nb.create<arith::CmpFOp>(nl, arith::CmpFPredicate::UNO, x, x);
      hit = nb.create<arith::OrIOp>(nl, equal, nan);
    } else {
      hit = nb.create<arith::CmpIOp>(nl, arith::CmpIPredicate::eq, x, a[1]);
    }
    Value index = nb.create<arith::IndexCastOp>(nl, i64, nb.create<linalg::IndexOp>(nl, dim));
    Value first = nb.create<arith::MinSIOp>(nl, a[2], index);
    nb.create<linalg::YieldOp>(nl, Value(nb.create<arith::SelectOp>(nl, hit, first, a[2])));
  };
  return b
      .create<linalg::GenericOp>(loc, TypeRange{init.getType()}, ValueRange{input, extreme}, ValueRange{init}, maps,
                                 iterators, body)
      .getResult(0);
}

Value emitCumsum(OpBuilder &b, Location loc, Value input, int64_t dim, RankedTensorType resultType) {
  MLIRContext *ctx = b.getContext();
  auto inType = cast<RankedTensorType>(input.getType());
  const int64_t rank = inType.getRank();
  Type outElement = resultType.getElementType();
  const bool isFloat = isa<FloatType>(outElement);
  Type accElement = isFloat ? Type(b.getF64Type()) : outElement;
  TypedAttr zero = isFloat ? TypedAttr(b.getFloatAttr(accElement, 0.0)) : TypedAttr(b.getIntegerAttr(accElement, 0));
  Value acc0 = filledLine(b, loc, input, dim, accElement, zero);
  SmallVector<Value> dynamic;
  for (int64_t d = 0; d < rank; ++d)
    if (resultType.isDynamicDim(d))
      dynamic.push_back(b.create<tensor::DimOp>(loc, input, d));
  Value out0 = b.create<tensor::EmptyOp>(loc, resultType.getShape(), outElement, dynamic);
  Value lower = b.create<arith::ConstantIndexOp>(loc, 0), step = b.create<arith::ConstantIndexOp>(loc, 1);
  Value upper = b.create<tensor::DimOp>(loc, input, dim);
  auto lineMap = AffineMap::getMultiDimIdentityMap(rank - 1, ctx);
  SmallVector<utils::IteratorType> parallel(rank - 1, utils::IteratorType::parallel);
  auto loop = b.create<scf::ForOp>(
      loc, lower, upper, step, ValueRange{acc0, out0}, [&](OpBuilder &lb, Location ll, Value i, ValueRange carried) {
        // The slice [.., i, ..] of `t` (offsets 0 but i at dim, size 1 there).
        SmallVector<OpFoldResult> offsets(rank, lb.getIndexAttr(0)), sizes, strides(rank, lb.getIndexAttr(1));
        offsets[dim] = i;
        for (int64_t d = 0; d < rank; ++d)
          sizes.push_back(d == dim ? OpFoldResult(lb.getIndexAttr(1))
                                   : (inType.isDynamicDim(d)
                                          ? OpFoldResult(lb.create<tensor::DimOp>(ll, input, d).getResult())
                                          : OpFoldResult(lb.getIndexAttr(inType.getDimSize(d)))));
        auto lineOf = [&](Type element) { return cast<RankedTensorType>(carried[0].getType()).clone(element); };
        Value slice =
            lb.create<tensor::ExtractSliceOp>(ll, lineOf(inType.getElementType()), input, offsets, sizes, strides);
        Value acc =
            lb.create<linalg::GenericOp>(ll, TypeRange{carried[0].getType()}, ValueRange{slice}, ValueRange{carried[0]},
                                         SmallVector<AffineMap>{lineMap, lineMap}, parallel,
                                         [&](OpBuilder &nb, Location nl, ValueRange a) {
                                           Value x = widen(nb, nl, a[0]);
                                           Value sum;
                                           if (isFloat) {
                                             if (x.getType() != accElement)
                                               x = nb.create<arith::ExtFOp>(nl, accElement, x);
                                             sum = nb.create<arith::AddFOp>(nl, a[1], x);
                                           } else {
                                             sum = nb.create<arith::AddIOp>(nl, a[1], x);
                                           }
                                           nb.create<linalg::YieldOp>(nl, sum);
                                         })
                .getResult(0);
        Value dest = lb.create<tensor::ExtractSliceOp>(ll, lineOf(outElement), carried[1], offsets, sizes, strides);
        Value line = lb.create<linalg::GenericOp>(ll, TypeRange{dest.getType()}, ValueRange{acc}, ValueRange{dest},
                                                  SmallVector<AffineMap>{lineMap, lineMap}, parallel,
                                                  [&](OpBuilder &nb, Location nl, ValueRange a) {
                                                    Value v = a[0];
                                                    if (v.getType() != outElement)
                                                      v = nb.create<arith::TruncFOp>(nl, outElement, v);
                                                    nb.create<linalg::YieldOp>(nl, v);
                                                  })
                         .getResult(0);
        Value out = lb.create<tensor::InsertSliceOp>(ll, line, carried[1], offsets, sizes, strides);
        lb.create<scf::YieldOp>(ll, ValueRange{acc, out});
      });
  return loop.getResult(1);
}

} // namespace kiln::codegen::cpu
