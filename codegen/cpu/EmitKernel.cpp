// kiln.fusion -> func.func @<kernel> with a linalg-on-tensors body.
//
// Each kiln op in the fusion body becomes one linalg op on tensors
// (linalg.generic for elementwise ops and constants, linalg.fill +
// linalg.generic with reduction iterators for reductions). Fusing those
// generics into loop nests is left to linalg's elementwise fusion in
// lowerKernelsToLLVM, so this file stays a one-op-at-a-time translation.
//
// Row fusions (a body with kiln.reshape / kiln.broadcast, ir::RowSpace:
// layer_norm, softmax): every row-shaped value ([R], [R, 1]) is emitted as
// a tensor of the row dims only ([R]), so a reshape between row shapes is
// the identity and a broadcast over the row is a linalg.generic reading the
// [R] tensor with the map (r, c) -> (r). The kernel function is marked
// `kiln.rows` (the number of row dims) and lowerKernelsToLLVM tiles its loop
// nest over rows, so each row is read from memory once.
//
// bf16/f16 are storage types here: every linalg body widens a bf16/f16
// operand element with arith.extf and computes in f32, and a bf16/f16 kernel
// result is rounded once, with arith.truncf, when it is stored (Inductor's
// "upcast to fp32" code generation). Intermediate values between body ops
// are never rounded; an explicit kiln.convert to bf16/f16 is (truncf +
// extf), so `f32 -> bf16 -> f32` keeps its meaning.
#include "CpuBackend.h"
#include "EmitIndexing.h"
#include "KernelAbi.h"
#include "EmitOps.h"

#include <cmath>
#include <functional>
#include <optional>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

namespace kiln::codegen::cpu {

using namespace mlir;

namespace {

/// i1 is stored as one byte per element; everything else as itself.
Type storageElementType(Type element) {
  if (element.isInteger(1))
    return IntegerType::get(element.getContext(), 8);
  return element;
}

/// The memref type of a kernel operand: its shape, the strides it has at
/// run time (operandStrides; kDynamic where unknown), any offset.
MemRefType operandMemRefType(RankedTensorType type, ArrayRef<int64_t> strides) {
  auto layout = StridedLayoutAttr::get(type.getContext(), ShapedType::kDynamic, strides);
  return MemRefType::get(type.getShape(), storageElementType(type.getElementType()), layout);
}

/// The memref type of a kernel result: static shape, contiguous.
MemRefType resultMemRefType(RankedTensorType type) {
  return MemRefType::get(type.getShape(), storageElementType(type.getElementType()));
}

using ScalarBody = function_ref<Value(OpBuilder &, Location, ValueRange)>;

bool isLowFloat(Type t) { return t.isBF16() || t.isF16(); }

/// The element type kernels compute a value of type `element` in: f32 for
/// bf16/f16, the type itself otherwise.
Type computeElementType(Type element) {
  return isLowFloat(element) ? Float32Type::get(element.getContext()) : element;
}

RankedTensorType computeType(RankedTensorType type) {
  return type.clone(computeElementType(type.getElementType()));
}

/// Widens bf16/f16 block arguments of a linalg body to f32 (arith.extf, exact).
SmallVector<Value> widenArgs(OpBuilder &nb, Location nl, ValueRange args) {
  SmallVector<Value> wide(args.begin(), args.end());
  for (Value &v : wide)
    if (isLowFloat(v.getType()))
      v = nb.create<arith::ExtFOp>(nl, nb.getF32Type(), v);
  return wide;
}

/// Float32 sums of more terms than this accumulate in float64: the eager
/// kernels sum in cascade (kernels::contiguous_sum, error ~ log n ulp), a
/// linalg reduction sums in loop order (error ~ n ulp); beyond this length
/// the float64 accumulator keeps compiled sums as close to eager as to the
/// exact sum (PyTorch's CPU batch_norm statistics also accumulate in double).
constexpr int64_t kSequentialSumLimit = 1024;

/// Emits kiln ops of one fusion body as linalg ops on tensors.
class KernelEmitter {
public:
  KernelEmitter(OpBuilder &builder, Location loc) : b(builder), loc(loc) {}

  /// Shape-generic kernels: the (possibly dynamic) type of a body value, the
  /// sizes of a constant's dynamic dims, and constants read from scalar
  /// arguments. Unset for static kernels.
  std::function<RankedTensorType(Value)> genericType;
  std::function<SmallVector<Value>(Operation *)> constantSizes;
  llvm::DenseMap<Operation *, Value> scalarArguments;

  /// Set for a row fusion: row-shaped values are emitted over the row dims.
  std::optional<ir::RowSpace> rows;

  /// `type` (the possibly generic type of IR value `v`) as emitted: a row
  /// shape of a row fusion keeps only its row dims.
  RankedTensorType emitted(Value v, RankedTensorType type) const {
    if (!rows || type.getRank() <= rows->rows)
      return type;
    if (!rows->isRowShape(cast<RankedTensorType>(v.getType()).getShape()))
      return type;
    return RankedTensorType::get(type.getShape().take_front(rows->rows), type.getElementType());
  }

  /// A linalg.generic over `resultType` whose element is `tensor` read
  /// through `read` (a map from the result's loops to `tensor`'s dims);
  /// `dynamic`: the sizes of `resultType`'s dynamic dims.
  Value readThrough(Value tensor, RankedTensorType resultType, AffineMap read, ValueRange dynamic) {
    const int64_t rank = resultType.getRank();
    SmallVector<AffineMap> maps = {read, AffineMap::getMultiDimIdentityMap(rank, b.getContext())};
    SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
    Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(), resultType.getElementType(), dynamic);
    return b
        .create<linalg::GenericOp>(loc, TypeRange{resultType}, ValueRange{tensor}, ValueRange{init}, maps, iterators,
                                   [](OpBuilder &nb, Location nl, ValueRange args) {
                                     nb.create<linalg::YieldOp>(nl, args[0]);
                                   })
        .getResult(0);
  }

  /// The row-shaped kernel argument `tensor` ([R, 1], emitted type `to`
  /// [R]) read through the map (r) -> (r, 0).
  Value dropUnitDims(Value tensor, RankedTensorType to) {
    auto from = cast<RankedTensorType>(tensor.getType());
    if (from.getRank() == to.getRank())
      return tensor;
    MLIRContext *ctx = b.getContext();
    const int64_t rank = to.getRank();
    SmallVector<AffineExpr> exprs;
    for (int64_t d = 0; d < from.getRank(); ++d)
      exprs.push_back(d < rank ? getAffineDimExpr(d, ctx) : getAffineConstantExpr(0, ctx));
    return readThrough(tensor, to, AffineMap::get(rank, 0, exprs, ctx), dynamicSizesOf(to, tensor));
  }

  /// `tensor` over the leading dims of `resultType` read as (d0, ..) ->
  /// (d0, .. d_{rank(tensor)-1}): a row broadcast ([R] -> [R, C]) or the
  /// unit dims of a row-shaped result ([R] -> [R, 1]). `sizes`: the
  /// dynamic sizes of `resultType` (default: those of `tensor`'s dims).
  Value broadcastRows(Value tensor, RankedTensorType resultType, ValueRange sizes) {
    MLIRContext *ctx = b.getContext();
    const int64_t rank = resultType.getRank();
    const int64_t inRank = cast<RankedTensorType>(tensor.getType()).getRank();
    SmallVector<AffineExpr> exprs;
    for (int64_t d = 0; d < inRank; ++d)
      exprs.push_back(getAffineDimExpr(d, ctx));
    SmallVector<Value> dynamic(sizes.begin(), sizes.end());
    if (dynamic.empty())
      for (int64_t d = 0; d < std::min(rank, inRank); ++d)
        if (resultType.isDynamicDim(d))
          dynamic.push_back(b.create<tensor::DimOp>(loc, tensor, d));
    return readThrough(tensor, resultType, AffineMap::get(rank, 0, exprs, ctx), dynamic);
  }

  /// The sizes of `like`'s dynamic dims that `type` also has dynamic
  /// (tensor.dim; `like` has the same shape).
  SmallVector<Value> dynamicSizesOf(RankedTensorType type, Value like) {
    SmallVector<Value> sizes;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        sizes.push_back(b.create<tensor::DimOp>(loc, like, d));
    return sizes;
  }

  /// A linalg.generic over `resultType`'s shape, all loops parallel, all
  /// operands and the result indexed by the identity map. Dynamic dims take
  /// their sizes from the first input, or from `sizes` when there is none.
  Value elementwise(RankedTensorType resultType, ValueRange inputs, ScalarBody body, ValueRange sizes = {}) {
    MLIRContext *ctx = b.getContext();
    AffineMap id = AffineMap::getMultiDimIdentityMap(resultType.getRank(), ctx);
    SmallVector<AffineMap> maps(inputs.size() + 1, id);
    SmallVector<utils::IteratorType> iterators(resultType.getRank(), utils::IteratorType::parallel);
    SmallVector<Value> dynamic = inputs.empty() ? SmallVector<Value>(sizes.begin(), sizes.end())
                                                : dynamicSizesOf(resultType, inputs[0]);
    Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(), resultType.getElementType(), dynamic);
    auto generic = b.create<linalg::GenericOp>(loc, TypeRange{resultType}, inputs, ValueRange{init}, maps, iterators,
                                               [&](OpBuilder &nb, Location nl, ValueRange args) {
                                                 SmallVector<Value> wide = widenArgs(nb, nl, args.drop_back());
                                                 Value r = body(nb, nl, wide);
                                                 nb.create<linalg::YieldOp>(nl, r);
                                               });
    return generic.getResult(0);
  }

  /// True if reducing `input` over `dims` adds more than kSequentialSumLimit
  /// elements into each result (or a reduced size is dynamic).
  static bool longReduction(Value input, ArrayRef<int64_t> dims) {
    auto type = cast<RankedTensorType>(input.getType());
    int64_t n = 1;
    for (int64_t d : dims) {
      if (type.isDynamicDim(d))
        return true;
      n *= type.getDimSize(d);
    }
    return n > kSequentialSumLimit;
  }

  /// Reduces `input` over `dims` with `combine(element, accumulator)`
  /// starting from `identity`; the result drops the reduced dims.
  Value reduction(Value input, ArrayRef<int64_t> dims, RankedTensorType resultType, TypedAttr identity,
                  ScalarBody combine) {
    MLIRContext *ctx = b.getContext();
    auto inputType = cast<RankedTensorType>(input.getType());
    const int64_t rank = inputType.getRank();
    SmallVector<utils::IteratorType> iterators(rank, utils::IteratorType::parallel);
    SmallVector<AffineExpr> kept;
    for (int64_t d = 0; d < rank; ++d) {
      if (llvm::is_contained(dims, d))
        iterators[d] = utils::IteratorType::reduction;
      else
        kept.push_back(getAffineDimExpr(d, ctx));
    }
    SmallVector<AffineMap> maps = {AffineMap::getMultiDimIdentityMap(rank, ctx), AffineMap::get(rank, 0, kept, ctx)};
    SmallVector<Value> dynamic;
    for (auto [r, e] : llvm::enumerate(kept))
      if (resultType.isDynamicDim(r))
        dynamic.push_back(b.create<tensor::DimOp>(loc, input, cast<AffineDimExpr>(e).getPosition()));
    Value empty = b.create<tensor::EmptyOp>(loc, resultType.getShape(), resultType.getElementType(), dynamic);
    Value start = b.create<arith::ConstantOp>(loc, identity);
    Value init = b.create<linalg::FillOp>(loc, ValueRange{start}, ValueRange{empty}).getResult(0);
    auto generic = b.create<linalg::GenericOp>(
        loc, TypeRange{resultType}, ValueRange{input}, ValueRange{init}, maps, iterators,
        [&](OpBuilder &nb, Location nl, ValueRange args) {
          nb.create<linalg::YieldOp>(nl, combine(nb, nl, widenArgs(nb, nl, args)));
        });
    return generic.getResult(0);
  }

  /// Translates one body op; `operands` are the already-translated tensors
  /// (compute types, or bf16/f16 kernel operands). The result is a tensor of
  /// the compute type of the op's result.
  FailureOr<Value> emit(Operation *op, ValueRange operands) {
    auto irType =
        emitted(op->getResult(0),
                genericType ? genericType(op->getResult(0)) : cast<RankedTensorType>(op->getResult(0).getType()));
    Type irElement = irType.getElementType();
    RankedTensorType resultType = computeType(irType);
    Type element = resultType.getElementType();
    bool isFloat = isa<FloatType>(element);
    auto binary = [&](auto floatOp, auto intOp) -> Value {
      using FloatOp = decltype(floatOp);
      using IntOp = decltype(intOp);
      return elementwise(resultType, operands, [&](OpBuilder &nb, Location nl, ValueRange a) -> Value {
        if (isFloat)
          return nb.create<FloatOp>(nl, a[0], a[1]);
        return nb.create<IntOp>(nl, a[0], a[1]);
      });
    };
    auto unary = [&](auto build) -> Value {
      return elementwise(resultType, operands,
                         [&](OpBuilder &nb, Location nl, ValueRange a) { return build(nb, nl, a[0]); });
    };
    return TypeSwitch<Operation *, FailureOr<Value>>(op)
        .Case([&](ir::ConstantOp c) -> FailureOr<Value> {
          SmallVector<Value> sizes;
          if (constantSizes)
            sizes = constantSizes(op);
          if (Value runtime = scalarArguments.lookup(op))
            return elementwise(
                resultType, {}, [&](OpBuilder &, Location, ValueRange) -> Value { return runtime; }, sizes);
          // A bf16/f16 constant holds the value rounded to its type.
          TypedAttr value = scalarAttr(element, roundTo(irElement, c.getValue().convertToDouble()));
          return elementwise(
              resultType, {},
              [&](OpBuilder &nb, Location nl, ValueRange) -> Value { return nb.create<arith::ConstantOp>(nl, value); },
              sizes);
        })
        .Case([&](ir::AddOp) { return binary(arith::AddFOp(), arith::AddIOp()); })
        .Case([&](ir::SubOp) { return binary(arith::SubFOp(), arith::SubIOp()); })
        .Case([&](ir::MulOp) { return binary(arith::MulFOp(), arith::MulIOp()); })
        .Case([&](ir::DivOp) {
          return elementwise(resultType, operands, [&](OpBuilder &nb, Location nl, ValueRange a) -> Value {
            if (isFloat)
              return nb.create<arith::DivFOp>(nl, a[0], a[1]);
            return emitIntegerDivide(nb, nl, a[0], a[1]); // 0 where the divisor is 0, no trap
          });
        })
        .Case([&](ir::NegOp) {
          return unary([&](OpBuilder &nb, Location nl, Value x) -> Value {
            if (isFloat)
              return nb.create<arith::NegFOp>(nl, x);
            Value zero = nb.create<arith::ConstantOp>(nl, nb.getIntegerAttr(element, 0));
            return nb.create<arith::SubIOp>(nl, zero, x);
          });
        })
        .Case([&](ir::ExpOp) {
          return unary([](OpBuilder &nb, Location nl, Value x) -> Value { return nb.create<math::ExpOp>(nl, x); });
        })
        .Case([&](ir::LogOp) {
          return unary([](OpBuilder &nb, Location nl, Value x) -> Value { return nb.create<math::LogOp>(nl, x); });
        })
        // sqrt/abs become LLVM intrinsics (vsqrtps, and), rsqrt is 1 / sqrt;
        // tanh/sin/cos get the math dialect's polynomial approximations in
        // lowerKernelsToLLVM (like exp/log), so their loops vectorize.
        .Case([&](ir::SqrtOp) {
          return unary([](OpBuilder &nb, Location nl, Value x) -> Value { return nb.create<math::SqrtOp>(nl, x); });
        })
        .Case([&](ir::RsqrtOp) {
          return unary([](OpBuilder &nb, Location nl, Value x) -> Value { return nb.create<math::RsqrtOp>(nl, x); });
        })
        .Case([&](ir::TanhOp) {
          return unary([](OpBuilder &nb, Location nl, Value x) -> Value { return nb.create<math::TanhOp>(nl, x); });
        })
        .Case([&](ir::SinOp) {
          return unary([](OpBuilder &nb, Location nl, Value x) -> Value { return nb.create<math::SinOp>(nl, x); });
        })
        .Case([&](ir::CosOp) {
          return unary([](OpBuilder &nb, Location nl, Value x) -> Value { return nb.create<math::CosOp>(nl, x); });
        })
        .Case([&](ir::AbsOp) {
          return unary([&](OpBuilder &nb, Location nl, Value x) -> Value {
            if (isFloat)
              return nb.create<math::AbsFOp>(nl, x);
            return nb.create<math::AbsIOp>(nl, x);
          });
        })
        .Case([&](ir::PowOp p) {
          const double e = p.getExponent().convertToDouble();
          return unary([&](OpBuilder &nb, Location nl, Value x) -> Value { return power(nb, nl, x, element, e); });
        })
        .Case([&](ir::ReluOp) {
          // x < 0 ? 0 : x, like torch.relu (clamp_min): NaN and -0.0 pass
          // through (maximumf would turn -0.0 into +0.0).
          return unary([&](OpBuilder &nb, Location nl, Value x) -> Value {
            Value zero = nb.create<arith::ConstantOp>(nl, scalarAttr(element, 0.0));
            if (!isFloat)
              return nb.create<arith::MaxSIOp>(nl, x, zero);
            Value negative = nb.create<arith::CmpFOp>(nl, arith::CmpFPredicate::OLT, x, zero);
            return nb.create<arith::SelectOp>(nl, negative, zero, x);
          });
        })
        .Case([&](ir::CompareOp c) -> FailureOr<Value> {
          ir::ComparePredicate predicate = c.getPredicate();
          Type operandElement = computeElementType(cast<RankedTensorType>(c.getLhs().getType()).getElementType());
          return elementwise(resultType, operands, [&](OpBuilder &nb, Location nl, ValueRange a) {
            return compare(nb, nl, predicate, operandElement, a[0], a[1]);
          });
        })
        .Case([&](ir::SelectOp) {
          return elementwise(resultType, operands, [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
            return nb.create<arith::SelectOp>(nl, a[0], a[1], a[2]);
          });
        })
        .Case([&](ir::ConvertOp c) -> FailureOr<Value> {
          Type from = cast<RankedTensorType>(c.getInput().getType()).getElementType();
          if (from == irElement)
            return operands[0];
          return elementwise(resultType, operands, [&](OpBuilder &nb, Location nl, ValueRange a) {
            return convertCompute(nb, nl, a[0], from, irElement);
          });
        })
        .Case([&](ir::ReduceSumOp r) -> FailureOr<Value> {
          // A long float32 sum accumulates in float64 (sumAccumulator), then
          // rounds once: a sequential float32 accumulation of n terms is off
          // by up to n/2 ulp, which batch_norm's E[x^2] - E[x]^2 amplifies.
          const bool wide = element.isF32() && longReduction(operands[0], r.getDims());
          RankedTensorType accType = wide ? RankedTensorType::get(resultType.getShape(), b.getF64Type())
                                          : resultType;
          Value sum = reduction(operands[0], r.getDims(), accType, scalarAttr(accType.getElementType(), 0.0),
                                [&](OpBuilder &nb, Location nl, ValueRange a) -> Value {
                                  // reassoc lets LLVM vectorize the sum (the
                                  // order of additions changes, as in PyTorch).
                                  if (wide)
                                    return nb.create<arith::AddFOp>(
                                        nl, nb.create<arith::ExtFOp>(nl, nb.getF64Type(), a[0]), a[1],
                                        arith::FastMathFlags::reassoc);
                                  if (isFloat)
                                    return nb.create<arith::AddFOp>(nl, a[0], a[1], arith::FastMathFlags::reassoc);
                                  return nb.create<arith::AddIOp>(nl, a[0], a[1]);
                                });
          if (!wide)
            return sum;
          return elementwise(resultType, ValueRange{sum}, [&](OpBuilder &nb, Location nl, ValueRange a) -> Value {
            return nb.create<arith::TruncFOp>(nl, nb.getF32Type(), a[0]);
          });
        })
        // Row fusions only (the verifier's rowSpaceOf): both sides of a
        // reshape are emitted as the same [R] tensor; a broadcast reads the
        // [R] tensor once per element of the row.
        .Case([&](ir::ReshapeOp) -> FailureOr<Value> {
          if (!rows || operands[0].getType() != resultType)
            return op->emitOpError("is only lowered between row shapes of a row fusion");
          return operands[0];
        })
        .Case([&](ir::BroadcastOp) -> FailureOr<Value> {
          if (!rows)
            return op->emitOpError("is only lowered inside a row fusion");
          return broadcastRows(operands[0], resultType, constantSizes ? constantSizes(op) : SmallVector<Value>());
        })
        .Case([&](ir::ReduceMaxOp r) -> FailureOr<Value> {
          TypedAttr lowest =
              isFloat ? TypedAttr(b.getFloatAttr(element, -INFINITY))
                      : TypedAttr(b.getIntegerAttr(element, APInt::getSignedMinValue(element.getIntOrFloatBitWidth())));
          return reduction(operands[0], r.getDims(), resultType, lowest,
                           [&](OpBuilder &nb, Location nl, ValueRange a) -> Value {
                             if (isFloat)
                               return nb.create<arith::MaximumFOp>(nl, a[0], a[1]);
                             return nb.create<arith::MaxSIOp>(nl, a[0], a[1]);
                           });
        })
        .Case([&](ir::GatherOp g) -> FailureOr<Value> {
          return emitGather(b, loc, g.getDim(), operands[0], operands[1], resultType);
        })
        .Case([&](ir::ScatterAddOp s) -> FailureOr<Value> {
          return emitScatterAdd(b, loc, s.getDim(), operands[0], operands[1], operands[2], resultType);
        })
        // Issue 13 (EmitOps.h): min reduction, arg reductions, scan, and
        // the scalar bodies of erf, rounding, extremes and division modes.
        .Case([&](ir::ReduceMinOp r) -> FailureOr<Value> {
          TypedAttr highest =
              isFloat ? TypedAttr(b.getFloatAttr(element, INFINITY))
                      : TypedAttr(b.getIntegerAttr(element, APInt::getSignedMaxValue(element.getIntOrFloatBitWidth())));
          return reduction(operands[0], r.getDims(), resultType, highest,
                           [&](OpBuilder &nb, Location nl, ValueRange a) -> Value {
                             if (isFloat)
                               return nb.create<arith::MinimumFOp>(nl, a[0], a[1]);
                             return nb.create<arith::MinSIOp>(nl, a[0], a[1]);
                           });
        })
        .Case([&](ir::ArgMaxOp r) { return emitArgReduction(b, loc, operands[0], r.getDims()[0], /*isMax=*/true); })
        .Case([&](ir::ArgMinOp r) { return emitArgReduction(b, loc, operands[0], r.getDims()[0], /*isMax=*/false); })
        .Case([&](ir::CumsumOp r) { return emitCumsum(b, loc, operands[0], r.getDims()[0], resultType); })
        .Default([&](Operation *other) -> FailureOr<Value> {
          if (hasScalarBody(other))
            return elementwise(resultType, operands, [&](OpBuilder &nb, Location nl, ValueRange a) {
              return emitScalarOp(other, nb, nl, a, element);
            });
          return other->emitOpError("cannot be lowered inside a kiln.fusion by the CPU backend");
        });
  }

  /// A scalar attribute of `type` holding `value` (i1: value != 0).
  TypedAttr scalarAttr(Type type, double value) {
    if (isa<FloatType>(type))
      return b.getFloatAttr(type, value);
    if (type.isInteger(1))
      return b.getIntegerAttr(type, value != 0.0 ? 1 : 0);
    return b.getIntegerAttr(type, static_cast<int64_t>(value));
  }

  /// i8 storage -> i1 (nonzero is true).
  Value loadBool(Value bytes) {
    auto type = cast<RankedTensorType>(bytes.getType());
    return elementwise(type.clone(b.getI1Type()), {bytes}, [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
      Value zero = nb.create<arith::ConstantOp>(nl, nb.getI8IntegerAttr(0));
      return nb.create<arith::CmpIOp>(nl, arith::CmpIPredicate::ne, a[0], zero);
    });
  }

  /// i1 -> i8 storage (0 or 1).
  Value storeBool(Value bits) {
    auto type = cast<RankedTensorType>(bits.getType());
    return elementwise(type.clone(b.getI8Type()), {bits}, [](OpBuilder &nb, Location nl, ValueRange a) -> Value {
      return nb.create<arith::ExtUIOp>(nl, nb.getI8Type(), a[0]);
    });
  }

  /// A copy of `value` in a fresh tensor of its compute type (so it can be
  /// materialized into a second destination, or when it is a kernel argument).
  Value copy(Value value) {
    auto type = cast<RankedTensorType>(value.getType());
    return elementwise(computeType(type), {value}, [](OpBuilder &, Location, ValueRange a) { return a[0]; });
  }

  /// `value` rounded to the bf16/f16 `element` (nearest even), for storing
  /// a kernel result: always a fresh linalg.generic.
  Value narrow(Value value, Type element) {
    auto type = cast<RankedTensorType>(value.getType());
    return elementwise(type.clone(element), {value}, [&](OpBuilder &nb, Location nl, ValueRange a) -> Value {
      return nb.create<arith::TruncFOp>(nl, element, a[0]);
    });
  }

private:
  /// `value` rounded to `type` if it is bf16/f16 (nearest even), else itself.
  static double roundTo(Type type, double value) {
    if (!isLowFloat(type))
      return value;
    APFloat f(value);
    bool lost = false;
    f.convert(cast<FloatType>(type).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    return f.convertToDouble();
  }

  /// kiln.convert from `from` to `to` on a value of computeElementType(from),
  /// giving computeElementType(to). Into bf16/f16 the value is rounded
  /// (truncf) and widened back (extf); a widening to f32 is the identity.
  static Value convertCompute(OpBuilder &nb, Location nl, Value v, Type from, Type to) {
    Type cfrom = computeElementType(from), cto = computeElementType(to);
    if (isLowFloat(to)) {
      Value wide = cfrom == cto ? v : convertScalar(nb, nl, v, cfrom, cto);
      Value rounded = nb.create<arith::TruncFOp>(nl, to, wide);
      return nb.create<arith::ExtFOp>(nl, cto, rounded);
    }
    if (cfrom == cto)
      return v;
    return convertScalar(nb, nl, v, cfrom, cto);
  }

  /// x ^ e for a constant exponent, as torch.pow(tensor, float): small
  /// integral exponents are multiplications (exact, vectorizable; x ^ 0 is 1
  /// even for NaN), +-0.5 are sqrt/rsqrt, anything else is math.powf.
  static Value power(OpBuilder &nb, Location nl, Value x, Type element, double e) {
    auto constant = [&](double v) -> Value { return nb.create<arith::ConstantOp>(nl, nb.getFloatAttr(element, v)); };
    if (e == 0.5)
      return nb.create<math::SqrtOp>(nl, x);
    if (e == -0.5)
      return nb.create<math::RsqrtOp>(nl, x);
    if (e == std::trunc(e) && std::fabs(e) <= 64.0) {
      auto n = static_cast<int64_t>(std::fabs(e));
      if (n == 0)
        return constant(1.0);
      // Binary exponentiation: x^n with O(log n) multiplications.
      Value result, base = x;
      while (n > 0) {
        if (n & 1)
          result = result ? nb.create<arith::MulFOp>(nl, result, base).getResult() : base;
        n >>= 1;
        if (n > 0)
          base = nb.create<arith::MulFOp>(nl, base, base);
      }
      if (e < 0)
        result = nb.create<arith::DivFOp>(nl, constant(1.0), result);
      return result;
    }
    return nb.create<math::PowFOp>(nl, x, constant(e));
  }

  static Value compare(OpBuilder &nb, Location nl, ir::ComparePredicate p, Type element, Value x, Value y) {
    if (isa<FloatType>(element)) {
      // Ordered predicates, except ne (true when either is NaN, like torch).
      arith::CmpFPredicate fp = arith::CmpFPredicate::OEQ;
      switch (p) {
      case ir::ComparePredicate::eq:
        fp = arith::CmpFPredicate::OEQ;
        break;
      case ir::ComparePredicate::ne:
        fp = arith::CmpFPredicate::UNE;
        break;
      case ir::ComparePredicate::lt:
        fp = arith::CmpFPredicate::OLT;
        break;
      case ir::ComparePredicate::le:
        fp = arith::CmpFPredicate::OLE;
        break;
      case ir::ComparePredicate::gt:
        fp = arith::CmpFPredicate::OGT;
        break;
      case ir::ComparePredicate::ge:
        fp = arith::CmpFPredicate::OGE;
        break;
      }
      return nb.create<arith::CmpFOp>(nl, fp, x, y);
    }
    // Signed for integers; bools compare as unsigned (false < true).
    bool isBool = element.isInteger(1);
    arith::CmpIPredicate ip = arith::CmpIPredicate::eq;
    switch (p) {
    case ir::ComparePredicate::eq:
      ip = arith::CmpIPredicate::eq;
      break;
    case ir::ComparePredicate::ne:
      ip = arith::CmpIPredicate::ne;
      break;
    case ir::ComparePredicate::lt:
      ip = isBool ? arith::CmpIPredicate::ult : arith::CmpIPredicate::slt;
      break;
    case ir::ComparePredicate::le:
      ip = isBool ? arith::CmpIPredicate::ule : arith::CmpIPredicate::sle;
      break;
    case ir::ComparePredicate::gt:
      ip = isBool ? arith::CmpIPredicate::ugt : arith::CmpIPredicate::sgt;
      break;
    case ir::ComparePredicate::ge:
      ip = isBool ? arith::CmpIPredicate::uge : arith::CmpIPredicate::sge;
      break;
    }
    return nb.create<arith::CmpIOp>(nl, ip, x, y);
  }

  /// Element cast with kiln.convert's semantics.
  static Value convertScalar(OpBuilder &nb, Location nl, Value v, Type from, Type to) {
    bool fromFloat = isa<FloatType>(from), toFloat = isa<FloatType>(to);
    bool fromBool = from.isInteger(1), toBool = to.isInteger(1);
    if (fromFloat && toFloat) {
      unsigned fw = from.getIntOrFloatBitWidth(), tw = to.getIntOrFloatBitWidth();
      if (fw == tw) { // f16 <-> bf16 through f32
        Value wide = nb.create<arith::ExtFOp>(nl, nb.getF32Type(), v);
        return nb.create<arith::TruncFOp>(nl, to, wide);
      }
      if (fw < tw)
        return nb.create<arith::ExtFOp>(nl, to, v);
      return nb.create<arith::TruncFOp>(nl, to, v);
    }
    if (fromFloat && toBool) {
      Value zero = nb.create<arith::ConstantOp>(nl, nb.getFloatAttr(from, 0.0));
      return nb.create<arith::CmpFOp>(nl, arith::CmpFPredicate::UNE, v, zero);
    }
    if (fromFloat)
      return nb.create<arith::FPToSIOp>(nl, to, v);
    if (toFloat) {
      if (fromBool)
        return nb.create<arith::UIToFPOp>(nl, to, v);
      return nb.create<arith::SIToFPOp>(nl, to, v);
    }
    if (toBool) {
      Value zero = nb.create<arith::ConstantOp>(nl, nb.getIntegerAttr(from, 0));
      return nb.create<arith::CmpIOp>(nl, arith::CmpIPredicate::ne, v, zero);
    }
    unsigned fw = from.getIntOrFloatBitWidth(), tw = to.getIntOrFloatBitWidth();
    if (fw < tw) {
      if (fromBool)
        return nb.create<arith::ExtUIOp>(nl, to, v);
      return nb.create<arith::ExtSIOp>(nl, to, v);
    }
    return nb.create<arith::TruncIOp>(nl, to, v);
  }

  OpBuilder &b;
  Location loc;
};

} // namespace

/// Gives every tensor.empty of `func` a distinct `kiln.init` number. Two
/// inits that print alike (same type, same dim operands) would otherwise be
/// merged by CSE, and empty-tensor elimination (which replaces every use of
/// the empty it finds, LLVM 19) then hands a destination to every op that
/// starts from the merged init: the results of a multi-result fusion were
/// all computed into the first destination, and when an identity copy into
/// a result's init is folded away (a convert to the type a value already
/// has), an unrelated intermediate of the same shape was computed into that
/// result's destination (fuzzer seed 8100 graph 394: a bf16 autocast fusion
/// yielding relu as f32 and sin as bf16 returned relu in sin's place).
static void numberInits(func::FuncOp func) {
  int64_t next = 0;
  func.walk([&](tensor::EmptyOp empty) {
    empty->setAttr("kiln.init", IntegerAttr::get(IntegerType::get(empty.getContext(), 64), next++));
  });
}

/// `type` with the dims whose class is >= 0 made dynamic.
static RankedTensorType withDynamicDims(RankedTensorType type, ArrayRef<int> classes) {
  SmallVector<int64_t> shape(type.getShape());
  for (auto [d, c] : llvm::enumerate(classes))
    if (c >= 0)
      shape[d] = ShapedType::kDynamic;
  return RankedTensorType::get(shape, type.getElementType());
}

/// emitKernel and emitGenericKernel.
static LogicalResult emitKernelImpl(ir::FusionOp fusion, const KernelGeneralization *generic, StringRef name,
                                    ModuleOp kernels) {
  MLIRContext *ctx = fusion.getContext();
  Location loc = fusion.getLoc();
  Block &body = fusion.getBodyBlock();
  auto typeOf = [&](Value v, ArrayRef<int> classes) {
    auto type = cast<RankedTensorType>(v.getType());
    return generic ? withDynamicDims(type, classes) : type;
  };

  SmallVector<Type> argTypes;
  const std::vector<std::vector<int64_t>> strides = generic ? generic->inputStrides : operandStrides(fusion);
  for (auto [i, operand] : llvm::enumerate(fusion.getInputs())) {
    auto type = dyn_cast<RankedTensorType>(operand.getType());
    if (!type || !type.hasStaticShape())
      return fusion.emitOpError("operands must be statically shaped tensors");
    argTypes.push_back(operandMemRefType(
        typeOf(operand, generic ? ArrayRef<int>(generic->inputs[i]) : ArrayRef<int>()), strides[i]));
  }
  const unsigned numInputs = fusion.getInputs().size();
  SmallVector<Operation *> bodyOps;
  for (Operation &op : body.without_terminator())
    bodyOps.push_back(&op);
  const unsigned numScalars = generic ? generic->scalarConstants.size() : 0;
  for (unsigned k = 0; k < numScalars; ++k) {
    Type element = cast<RankedTensorType>(bodyOps[generic->scalarConstants[k]]->getResult(0).getType()).getElementType();
    argTypes.push_back(MemRefType::get({}, element));
  }
  for (auto [j, result] : llvm::enumerate(fusion.getResults()))
    argTypes.push_back(
        resultMemRefType(typeOf(result, generic ? ArrayRef<int>(generic->results[j]) : ArrayRef<int>())));
  // One status word per index check, after the results (KernelAbi.h indexChecks).
  const std::vector<runtime::IndexCheck> checks = indexChecks(fusion);
  for (size_t k = 0; k < checks.size(); ++k)
    argTypes.push_back(MemRefType::get({runtime::kIndexStatusElements}, IntegerType::get(ctx, 64)));

  OpBuilder b(ctx);
  b.setInsertionPointToEnd(kernels.getBody());
  auto func = b.create<func::FuncOp>(loc, name, FunctionType::get(ctx, argTypes, {}));
  // Kernel arguments never overlap a written one (the runtime's memory plan
  // gives each result its own memory), so all pointers are noalias: LLVM can
  // keep accumulators in registers and vectorize without runtime checks.
  for (unsigned i = 0; i < argTypes.size(); ++i)
    func.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(), b.getUnitAttr());
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  KernelEmitter emitter(b, loc);
  if (ir::isRowFusionBody(body)) {
    std::string why;
    FailureOr<ir::RowSpace> space = ir::rowSpaceOf(bodyOps, &why);
    if (failed(space))
      return fusion.emitOpError("is not a row fusion: ") << why;
    emitter.rows = *space;
    func->setAttr("kiln.rows", b.getI64IntegerAttr(space->rows));
  }

  // Size classes (read once from the argument that carries each) and body
  // positions; the emitter's callbacks refer to both.
  SmallVector<Value> classSizes;
  llvm::DenseMap<Value, unsigned> position;
  if (generic) {
    for (auto [arg, dim] : generic->sources) {
      unsigned index = arg < static_cast<int>(numInputs) ? arg : arg + numScalars;
      classSizes.push_back(b.create<memref::DimOp>(loc, entry->getArgument(index), dim));
    }
    for (auto [k, op] : llvm::enumerate(bodyOps))
      position[op->getResult(0)] = k;
    emitter.genericType = [&, generic](Value v) {
      auto it = position.find(v);
      return withDynamicDims(cast<RankedTensorType>(v.getType()), generic->body[it->second]);
    };
    emitter.constantSizes = [&, generic](Operation *op) {
      SmallVector<Value> sizes;
      for (int c : generic->body[position[op->getResult(0)]])
        if (c >= 0)
          sizes.push_back(classSizes[c]);
      return sizes;
    };
    for (unsigned k = 0; k < numScalars; ++k)
      emitter.scalarArguments[bodyOps[generic->scalarConstants[k]]] =
          b.create<memref::LoadOp>(loc, entry->getArgument(numInputs + k), ValueRange{});
  }

  // Operands: read-only tensors over the argument memrefs.
  IRMapping values;
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
    Value tensor = b.create<bufferization::ToTensorOp>(loc, entry->getArgument(i),
                                                       /*restrict=*/true, /*writable=*/false);
    if (cast<RankedTensorType>(arg.getType()).getElementType().isInteger(1))
      tensor = emitter.loadBool(tensor);
    auto argType = cast<RankedTensorType>(tensor.getType());
    tensor = emitter.dropUnitDims(tensor, emitter.emitted(arg, argType));
    values.map(arg, tensor);
  }

  // Body ops, in order; an indexing op also computes its status word.
  SmallVector<Value> statuses;
  for (Operation *op : bodyOps) {
    if (op->getNumResults() != 1)
      return op->emitOpError("expected one result inside a kiln.fusion");
    SmallVector<Value> operands;
    for (Value v : op->getOperands())
      operands.push_back(values.lookup(v));
    FailureOr<Value> result = emitter.emit(op, operands);
    if (failed(result))
      return failure();
    values.map(op->getResult(0), *result);
    if (ir::isIndexingOp(op))
      statuses.push_back(emitIndexStatus(b, loc, operands[1], checks[statuses.size()].size));
  }

  // Results: each written into its destination argument. A value that is a
  // kernel argument, or already written elsewhere, is copied first.
  llvm::DenseSet<Value> written;
  for (auto [j, yielded] : llvm::enumerate(fusion.getYield()->getOperands())) {
    Value tensor = values.lookup(yielded);
    Type element = cast<RankedTensorType>(yielded.getType()).getElementType();
    RankedTensorType stored =
        computeType(typeOf(fusion.getResult(j), generic ? ArrayRef<int>(generic->results[j]) : ArrayRef<int>()));
    if (cast<RankedTensorType>(tensor.getType()).getRank() != stored.getRank()) // a row value [R] stored as [R, 1]
      tensor = emitter.broadcastRows(tensor, stored.clone(cast<RankedTensorType>(tensor.getType()).getElementType()), {});
    if (isLowFloat(element))
      tensor = emitter.narrow(tensor, element); // rounded once, here
    else if (!tensor.getDefiningOp<linalg::GenericOp>() || written.contains(tensor))
      tensor = emitter.copy(tensor);
    written.insert(tensor);
    if (cast<RankedTensorType>(tensor.getType()).getElementType().isInteger(1))
      tensor = emitter.storeBool(tensor);
    b.create<bufferization::MaterializeInDestinationOp>(loc, /*result=*/Type(), tensor,
                                                        entry->getArgument(numInputs + numScalars + j),
                                                        /*restrict=*/true, /*writable=*/true);
  }
  const unsigned firstStatus = numInputs + numScalars + fusion.getNumResults();
  for (auto [k, status] : llvm::enumerate(statuses))
    b.create<bufferization::MaterializeInDestinationOp>(loc, /*result=*/Type(), status,
                                                        entry->getArgument(firstStatus + k),
                                                        /*restrict=*/true, /*writable=*/true);
  b.create<func::ReturnOp>(loc);
  numberInits(func);
  return success();
}

LogicalResult emitKernel(ir::FusionOp fusion, ModuleOp kernels, StringRef name) {
  StringRef symbol = name.empty() ? fusion.getKernel() : name;
  std::optional<KernelGeneralization> split;
  if (isRowSplittable(fusion))
    split = rowSplitGeneralization(fusion);
  if (failed(emitKernelImpl(fusion, split ? &*split : nullptr, symbol, kernels)))
    return failure();
  if (std::vector<runtime::InPlace> pairs = inPlacePairs(fusion); !pairs.empty()) {
    // Row-split and static kernels have no scalar arguments: results follow
    // the operands.
    SmallVector<int64_t> arguments;
    for (const runtime::InPlace &pair : pairs) {
      arguments.push_back(pair.operand);
      arguments.push_back(static_cast<int64_t>(fusion.getInputs().size()) + pair.result);
    }
    kernels.lookupSymbol<func::FuncOp>(symbol)->setAttr("kiln.in_place",
                                                        DenseI64ArrayAttr::get(fusion.getContext(), arguments));
  }
  return success();
}

LogicalResult emitGenericKernel(ir::FusionOp fusion, const KernelGeneralization &generic, StringRef name,
                                ModuleOp kernels) {
  return emitKernelImpl(fusion, &generic, name, kernels);
}

} // namespace kiln::codegen::cpu
