// kiln.gather / kiln.scatter_add and their index checks as linalg + scf on
// tensors (EmitIndexing.h). The gather is a parallel linalg.generic (linalg
// fuses it with pointwise consumers like any producer); the scatter-add is
// a sequential loop nest, never a parallel loop with racing updates.
#include "EmitIndexing.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace kiln::codegen::cpu {

using namespace mlir;

namespace {

/// bf16/f16 -> f32 (exact); anything else unchanged.
Value widen(OpBuilder &b, Location loc, Value v) {
  if (v.getType().isBF16() || v.getType().isF16())
    return b.create<arith::ExtFOp>(loc, b.getF32Type(), v);
  return v;
}

Value i64Constant(OpBuilder &b, Location loc, int64_t v) {
  return b.create<arith::ConstantOp>(loc, b.getI64IntegerAttr(v));
}

/// `i` (i64) is inside [0, size).
Value inRange(OpBuilder &b, Location loc, Value i, int64_t size) {
  Value low = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::sge, i, i64Constant(b, loc, 0));
  Value high = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, i, i64Constant(b, loc, size));
  return b.create<arith::AndIOp>(loc, low, high);
}

/// `coords` with entry `dim` replaced by the i64 `i` as an index.
SmallVector<Value> withIndex(OpBuilder &b, Location loc, ValueRange coords, int64_t dim, Value i) {
  SmallVector<Value> out(coords.begin(), coords.end());
  out[dim] = b.create<arith::IndexCastOp>(loc, b.getIndexType(), i);
  return out;
}

/// A tensor.empty of `type` whose dynamic sizes (shape-generic kernels) are
/// those of `like` (a tensor of the same shape).
Value emptyLike(OpBuilder &b, Location loc, RankedTensorType type, Value like) {
  SmallVector<Value> dynamic;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      dynamic.push_back(b.create<tensor::DimOp>(loc, like, d));
  return b.create<tensor::EmptyOp>(loc, type.getShape(), type.getElementType(), dynamic);
}

/// A copy of `input` in a fresh tensor of `type` (bf16/f16 widened).
Value widenedCopy(OpBuilder &b, Location loc, Value input, RankedTensorType type) {
  const int64_t rank = type.getRank();
  AffineMap id = AffineMap::getMultiDimIdentityMap(rank, b.getContext());
  SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
  Value init = emptyLike(b, loc, type, input);
  return b
      .create<linalg::GenericOp>(loc, TypeRange{type}, ValueRange{input}, ValueRange{init},
                                 SmallVector<AffineMap>{id, id}, iterators,
                                 [](OpBuilder &nb, Location nl, ValueRange args) {
                                   nb.create<linalg::YieldOp>(nl, widen(nb, nl, args[0]));
                                 })
      .getResult(0);
}

} // namespace

Value emitGather(OpBuilder &b, Location loc, int64_t dim, Value input, Value index, RankedTensorType resultType) {
  const int64_t rank = resultType.getRank();
  const int64_t size = cast<RankedTensorType>(input.getType()).getDimSize(dim);
  AffineMap id = AffineMap::getMultiDimIdentityMap(rank, b.getContext());
  SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
  Value init = emptyLike(b, loc, resultType, index);
  Type element = resultType.getElementType();
  auto body = [&](OpBuilder &nb, Location nl, ValueRange args) {
    if (size == 0) { // every index is out of range: the status reports it
      nb.create<linalg::YieldOp>(nl, ValueRange{nb.create<arith::ConstantOp>(nl, nb.getZeroAttr(element))});
      return;
    }
    Value clamped = nb.create<arith::MaxSIOp>(nl, args[0], i64Constant(nb, nl, 0));
    clamped = nb.create<arith::MinSIOp>(nl, clamped, i64Constant(nb, nl, size - 1));
    SmallVector<Value> coords;
    for (int64_t d = 0; d < rank; ++d)
      coords.push_back(nb.create<linalg::IndexOp>(nl, d));
    Value v = nb.create<tensor::ExtractOp>(nl, input, withIndex(nb, nl, coords, dim, clamped));
    nb.create<linalg::YieldOp>(nl, widen(nb, nl, v));
  };
  return b
      .create<linalg::GenericOp>(loc, TypeRange{resultType}, ValueRange{index}, ValueRange{init},
                                 SmallVector<AffineMap>{id, id}, iterators, body)
      .getResult(0);
}

Value emitScatterAdd(OpBuilder &b, Location loc, int64_t dim, Value input, Value index, Value src,
                     RankedTensorType resultType) {
  const int64_t size = resultType.getDimSize(dim);
  auto indexType = cast<RankedTensorType>(index.getType());
  Value acc = widenedCopy(b, loc, input, resultType);
  OpBuilder::InsertionGuard guard(b);
  Value zero = b.create<arith::ConstantIndexOp>(loc, 0), one = b.create<arith::ConstantIndexOp>(loc, 1);
  // The loop nest over the index, carrying the result tensor.
  SmallVector<scf::ForOp> loops;
  SmallVector<Value> ivs;
  for (int64_t d = 0; d < indexType.getRank(); ++d) {
    Value upper = b.create<tensor::DimOp>(loc, index, d);
    auto loop = b.create<scf::ForOp>(loc, zero, upper, one, ValueRange{acc});
    b.setInsertionPointToStart(loop.getBody());
    ivs.push_back(loop.getInductionVar());
    acc = loop.getRegionIterArgs()[0];
    loops.push_back(loop);
  }
  Value i = b.create<tensor::ExtractOp>(loc, index, ivs);
  auto skip = b.create<scf::IfOp>(loc, TypeRange{acc.getType()}, inRange(b, loc, i, size), /*withElse=*/true);
  b.setInsertionPointToStart(skip.thenBlock());
  SmallVector<Value> at = withIndex(b, loc, ivs, dim, i);
  Value current = b.create<tensor::ExtractOp>(loc, acc, at);
  Value add = widen(b, loc, b.create<tensor::ExtractOp>(loc, src, ivs));
  Value sum = isa<FloatType>(add.getType()) ? b.create<arith::AddFOp>(loc, current, add).getResult()
                                            : b.create<arith::AddIOp>(loc, current, add).getResult();
  b.create<scf::YieldOp>(loc, ValueRange{b.create<tensor::InsertOp>(loc, sum, acc, at)});
  b.setInsertionPointToStart(skip.elseBlock());
  b.create<scf::YieldOp>(loc, ValueRange{acc});
  Value result = skip.getResult(0);
  for (auto it = loops.rbegin(); it != loops.rend(); ++it) {
    b.setInsertionPointToEnd(it->getBody());
    b.create<scf::YieldOp>(loc, ValueRange{result});
    result = it->getResult(0);
  }
  return result;
}

Value emitIndexStatus(OpBuilder &b, Location loc, Value index, int64_t size) {
  MLIRContext *ctx = b.getContext();
  const int64_t rank = cast<RankedTensorType>(index.getType()).getRank();
  auto scalar = RankedTensorType::get({}, b.getI64Type());
  Value zero = i64Constant(b, loc, 0);
  auto filled = [&]() {
    Value empty = b.create<tensor::EmptyOp>(loc, ArrayRef<int64_t>{}, b.getI64Type());
    return b.create<linalg::FillOp>(loc, ValueRange{zero}, ValueRange{empty}).getResult(0);
  };
  Value found = filled(), first = filled();
  AffineMap all = AffineMap::getMultiDimIdentityMap(rank, ctx), none = AffineMap::get(rank, 0, {}, ctx);
  SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::reduction);
  auto body = [&](OpBuilder &nb, Location nl, ValueRange args) {
    Value bad = nb.create<arith::XOrIOp>(nl, inRange(nb, nl, args[0], size),
                                         nb.create<arith::ConstantOp>(nl, nb.getBoolAttr(true)));
    Value fresh = nb.create<arith::CmpIOp>(nl, arith::CmpIPredicate::eq, args[1], i64Constant(nb, nl, 0));
    Value take = nb.create<arith::AndIOp>(nl, bad, fresh);
    Value newFound = nb.create<arith::SelectOp>(nl, bad, i64Constant(nb, nl, 1), args[1]);
    Value newFirst = nb.create<arith::SelectOp>(nl, take, args[0], args[2]);
    nb.create<linalg::YieldOp>(nl, ValueRange{newFound, newFirst});
  };
  auto reduce = b.create<linalg::GenericOp>(loc, TypeRange{scalar, scalar}, ValueRange{index}, ValueRange{found, first},
                                            SmallVector<AffineMap>{all, none, none}, iterators, body);
  Value f = b.create<tensor::ExtractOp>(loc, reduce.getResult(0), ValueRange{});
  Value v = b.create<tensor::ExtractOp>(loc, reduce.getResult(1), ValueRange{});
  return b.create<tensor::FromElementsOp>(loc, RankedTensorType::get({2}, b.getI64Type()), ValueRange{f, v});
}

} // namespace kiln::codegen::cpu
