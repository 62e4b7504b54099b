// Verifiers, folders and helpers of the kiln ops (declared in KilnOps.td).
#include "kiln/ir/KilnOps.h"
#include "ShapeString.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>

#include "kiln/ir/KilnEnums.cpp.inc"

using mlir::getElementTypeOrSelf;

#define GET_OP_CLASSES
#include "kiln/ir/KilnOps.cpp.inc"

namespace kiln::ir {

using mlir::failure;
using mlir::LogicalResult;
using mlir::RankedTensorType;
using mlir::success;

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleaveComma(shape, os);
  os << "]";
  return text;
}

static RankedTensorType tensorTypeOf(mlir::Value value) { return mlir::cast<RankedTensorType>(value.getType()); }

//===----------------------------------------------------------------------===//
// Op classification
//===----------------------------------------------------------------------===//

/// The OpCategory of `op` (Ops.def), or failure for ops not in the table
/// (kiln.fusion, kiln.yield, other dialects).
static std::optional<OpCategory> categoryOf(mlir::Operation *op) {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  if (mlir::isa<OpClass>(op))                                                                                      \
    return OpCategory::category;
#include "kiln/ir/Ops.def"
  return std::nullopt;
}

bool isElementwiseOp(mlir::Operation *op) { return categoryOf(op) == OpCategory::Elementwise; }

bool isReductionOp(mlir::Operation *op) { return categoryOf(op) == OpCategory::Reduction; }

bool isFusibleOp(mlir::Operation *op) {
  return mlir::isa<ConstantOp, ReshapeOp, BroadcastOp>(op) || isElementwiseOp(op) || isReductionOp(op) ||
         isIndexingOp(op);
}

bool isLayoutOp(mlir::Operation *op) { return categoryOf(op) == OpCategory::Layout; }

bool isExternOp(mlir::Operation *op) {
  std::optional<OpCategory> category = categoryOf(op);
  return category == OpCategory::Contraction || category == OpCategory::Extern;
}

bool isIndexingOp(mlir::Operation *op) { return categoryOf(op) == OpCategory::Indexing; }

llvm::ArrayRef<int64_t> reductionDims(mlir::Operation *op) {
  auto dims = op->getAttrOfType<mlir::DenseI64ArrayAttr>("dims");
  if (!isReductionOp(op) || !dims)
    return {};
  return dims.asArrayRef();
}

bool isElementwiseFusion(mlir::Operation *op) {
  auto fusion = mlir::dyn_cast<FusionOp>(op);
  if (!fusion)
    return false;
  for (mlir::Operation &inner : fusion.getBodyBlock().without_terminator())
    if (isReductionOp(&inner) || isLayoutOp(&inner) || isIndexingOp(&inner))
      return false;
  return true;
}

llvm::SmallVector<std::pair<int, int>> inPlaceOperandPairs(mlir::Operation *op,
                                                           llvm::function_ref<bool(unsigned)> dies) {
  llvm::SmallVector<std::pair<int, int>> pairs;
  if (!isElementwiseFusion(op))
    return pairs;
  llvm::SmallVector<bool> taken(op->getNumOperands(), false);
  for (auto [r, result] : llvm::enumerate(op->getResults()))
    for (auto [k, operand] : llvm::enumerate(op->getOperands()))
      if (!taken[k] && operand.getType() == result.getType() && dies(k)) {
        taken[k] = true;
        pairs.push_back({static_cast<int>(k), static_cast<int>(r)});
        break;
      }
  return pairs;
}

//===----------------------------------------------------------------------===//
// Row fusions
//===----------------------------------------------------------------------===//

bool RowSpace::isRowShape(llvm::ArrayRef<int64_t> s) const {
  if (static_cast<int64_t>(s.size()) < rows || s.size() > shape.size())
    return false;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    if (s[d] != (d < rows ? shape[d] : 1))
      return false;
  return true;
}

mlir::FailureOr<RowSpace> rowSpaceOf(llvm::ArrayRef<mlir::Operation *> ops, std::string *why) {
  auto fail = [&](const std::string &reason) -> mlir::FailureOr<RowSpace> {
    if (why)
      *why = reason;
    return mlir::failure();
  };
  RowSpace space;
  bool found = false;
  for (mlir::Operation *op : ops) {
    if (!isReductionOp(op))
      continue;
    llvm::ArrayRef<int64_t> in = tensorTypeOf(op->getOperand(0)).getShape();
    if (mlir::isa<CumsumOp>(op))
      return fail("a kiln.cumsum (a kernel of its own)");
    llvm::ArrayRef<int64_t> dims = reductionDims(op);
    const int64_t rows = static_cast<int64_t>(in.size()) - static_cast<int64_t>(dims.size());
    for (auto [i, d] : llvm::enumerate(dims))
      if (d != rows + static_cast<int64_t>(i))
        return fail("reduction over dims that are not the trailing dims of " + shapeString(in));
    if (rows < 1)
      return fail("reduction to a scalar (no rows)");
    if (found && (space.shape != llvm::ArrayRef<int64_t>(in) || space.rows != rows))
      return fail("reductions over different spaces " + shapeString(space.shape) + " and " + shapeString(in));
    space.shape.assign(in.begin(), in.end());
    space.rows = rows;
    found = true;
  }
  if (!found)
    return fail("no reduction");
  if (space.isRowShape(space.shape))
    return fail("the reduced dims of " + shapeString(space.shape) + " all have size 1");
  auto fits = [&](mlir::Value v) {
    llvm::ArrayRef<int64_t> s = tensorTypeOf(v).getShape();
    return s == llvm::ArrayRef<int64_t>(space.shape) || space.isRowShape(s);
  };
  for (mlir::Operation *op : ops) {
    if (mlir::isa<TransposeOp>(op))
      return fail("a kiln.transpose");
    for (mlir::Value operand : op->getOperands())
      if (!fits(operand))
        return fail("operand of shape " + shapeString(tensorTypeOf(operand).getShape()) + " of '" +
                    op->getName().getStringRef().str() + "' is neither " + shapeString(space.shape) +
                    " nor a row shape");
    for (mlir::Value result : op->getResults())
      if (!fits(result))
        return fail("result of shape " + shapeString(tensorTypeOf(result).getShape()) + " of '" +
                    op->getName().getStringRef().str() + "' is neither " + shapeString(space.shape) +
                    " nor a row shape");
    if (auto reshape = mlir::dyn_cast<ReshapeOp>(op)) {
      if (!space.isRowShape(tensorTypeOf(reshape.getInput()).getShape()) ||
          !space.isRowShape(reshape.getType().getShape()))
        return fail("kiln.reshape that is not between row shapes");
    } else if (auto broadcast = mlir::dyn_cast<BroadcastOp>(op)) {
      llvm::ArrayRef<int64_t> in = tensorTypeOf(broadcast.getInput()).getShape();
      if (!space.isRowShape(in) || in.size() != space.shape.size())
        return fail("kiln.broadcast from " + shapeString(in) + " (expected a row shape of rank " +
                    std::to_string(space.shape.size()) + ")");
    }
  }
  return space;
}

bool isRowFusionBody(mlir::Block &body) {
  return llvm::any_of(body.without_terminator(),
                      [](mlir::Operation &op) { return mlir::isa<ReshapeOp, BroadcastOp>(op); });
}

//===----------------------------------------------------------------------===//
// ConstantOp
//===----------------------------------------------------------------------===//

mlir::OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValueAttr(); }

LogicalResult ConstantOp::verify() {
  mlir::Type element = getType().getElementType();
  double value = getValue().convertToDouble();
  if (element.isInteger(1) && value != 0.0 && value != 1.0)
    return emitOpError() << "i1 constant must be 0 or 1, got " << value;
  if (element.isInteger(64) && value != std::trunc(value))
    return emitOpError() << "i64 constant must be integral, got " << value;
  return success();
}

//===----------------------------------------------------------------------===//
// ConvertOp
//===----------------------------------------------------------------------===//

mlir::OpFoldResult ConvertOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

LogicalResult ConvertOp::verify() {
  auto in = tensorTypeOf(getInput());
  if (in.getShape() != getType().getShape())
    return emitOpError() << "changes the shape from " << shapeString(in.getShape()) << " to "
                         << shapeString(getType().getShape()) << "; convert only casts the element type";
  return success();
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::verify() {
  auto lhs = tensorTypeOf(getLhs());
  auto rhs = tensorTypeOf(getRhs());
  auto result = getType();
  const int64_t rank = lhs.getRank();
  if ((rank != 2 && rank != 3) || rhs.getRank() != rank || result.getRank() != rank)
    return emitOpError() << "expects rank-2 operands and result ([M, K] x [K, N]) or rank-3 ones ([B, M, K] x "
                            "[B, K, N]), got "
                         << shapeString(lhs.getShape()) << " x " << shapeString(rhs.getShape()) << " -> "
                         << shapeString(result.getShape());
  const int64_t m = rank - 2; // the row dim of lhs (and of the result)
  if (rank == 3 && lhs.getDimSize(0) != rhs.getDimSize(0))
    return emitOpError() << "batch dims differ: " << shapeString(lhs.getShape()) << " x "
                         << shapeString(rhs.getShape());
  if (lhs.getDimSize(m + 1) != rhs.getDimSize(m))
    return emitOpError() << "contraction dims differ: " << shapeString(lhs.getShape()) << " x "
                         << shapeString(rhs.getShape());
  if (result.getDimSize(m) != lhs.getDimSize(m) || result.getDimSize(m + 1) != rhs.getDimSize(m + 1) ||
      (rank == 3 && result.getDimSize(0) != lhs.getDimSize(0)))
    return emitOpError() << "result shape " << shapeString(result.getShape()) << " does not match "
                         << shapeString(lhs.getShape()) << " x " << shapeString(rhs.getShape());
  if (lhs.getElementType() != rhs.getElementType() || lhs.getElementType() != result.getElementType())
    return emitOpError() << "operand and result element types differ";
  return success();
}

//===----------------------------------------------------------------------===//
// TransposeOp
//===----------------------------------------------------------------------===//

static bool isIdentityPermutation(llvm::ArrayRef<int64_t> permutation) {
  for (auto [index, value] : llvm::enumerate(permutation))
    if (value != static_cast<int64_t>(index))
      return false;
  return true;
}

mlir::OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  if (isIdentityPermutation(getPermutation()) && getInput().getType() == getType())
    return getInput();
  if (auto splat = mlir::dyn_cast_or_null<mlir::FloatAttr>(adaptor.getInput()))
    return splat;
  // transpose(transpose(x, inner), outer) == transpose(x, inner[outer[i]]).
  if (auto producer = getInput().getDefiningOp<TransposeOp>()) {
    llvm::ArrayRef<int64_t> inner = producer.getPermutation();
    llvm::SmallVector<int64_t> composed;
    for (int64_t index : getPermutation())
      composed.push_back(inner[index]);
    getInputMutable().assign(producer.getInput());
    setPermutation(composed);
    if (isIdentityPermutation(composed) && getInput().getType() == getType())
      return getInput();
    return getResult();
  }
  return {};
}

LogicalResult TransposeOp::verify() {
  auto in = tensorTypeOf(getInput());
  llvm::ArrayRef<int64_t> permutation = getPermutation();
  if (static_cast<int64_t>(permutation.size()) != in.getRank())
    return emitOpError() << "permutation " << shapeString(permutation) << " does not match operand rank "
                         << in.getRank();
  llvm::SmallVector<bool> seen(permutation.size(), false);
  for (int64_t index : permutation) {
    if (index < 0 || index >= in.getRank() || seen[index])
      return emitOpError() << "permutation " << shapeString(permutation) << " is not a permutation of [0, "
                           << in.getRank() << ")";
    seen[index] = true;
  }
  llvm::SmallVector<int64_t> expected;
  for (int64_t index : permutation)
    expected.push_back(in.getDimSize(index));
  if (llvm::ArrayRef<int64_t>(expected) != getType().getShape())
    return emitOpError() << "result shape " << shapeString(getType().getShape()) << " should be "
                         << shapeString(expected);
  if (in.getElementType() != getType().getElementType())
    return emitOpError() << "operand and result element types differ";
  return success();
}

//===----------------------------------------------------------------------===//
// BroadcastOp
//===----------------------------------------------------------------------===//

mlir::OpFoldResult BroadcastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto splat = mlir::dyn_cast_or_null<mlir::FloatAttr>(adaptor.getInput()))
    return splat;
  // broadcast(broadcast(x)) == broadcast(x): numpy rules compose.
  if (auto producer = getInput().getDefiningOp<BroadcastOp>()) {
    getInputMutable().assign(producer.getInput());
    return getResult();
  }
  return {};
}

LogicalResult BroadcastOp::verify() {
  auto in = tensorTypeOf(getInput());
  auto out = getType();
  auto fail = [&]() {
    return emitOpError() << "cannot broadcast " << shapeString(in.getShape()) << " to " << shapeString(out.getShape());
  };
  if (in.getRank() > out.getRank())
    return fail();
  int64_t offset = out.getRank() - in.getRank();
  for (int64_t i = 0; i < in.getRank(); ++i) {
    int64_t dim = in.getDimSize(i);
    if (dim != 1 && dim != out.getDimSize(i + offset))
      return fail();
  }
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "operand and result element types differ";
  return success();
}

//===----------------------------------------------------------------------===//
// ReshapeOp
//===----------------------------------------------------------------------===//

mlir::OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto splat = mlir::dyn_cast_or_null<mlir::FloatAttr>(adaptor.getInput()))
    return splat;
  if (auto producer = getInput().getDefiningOp<ReshapeOp>()) {
    getInputMutable().assign(producer.getInput());
    if (getInput().getType() == getType())
      return getInput();
    return getResult();
  }
  return {};
}

LogicalResult ReshapeOp::verify() {
  auto in = tensorTypeOf(getInput());
  if (in.getNumElements() != getType().getNumElements())
    return emitOpError() << "cannot reshape " << shapeString(in.getShape()) << " (" << in.getNumElements()
                         << " elements) to " << shapeString(getType().getShape()) << " (" << getType().getNumElements()
                         << " elements)";
  if (in.getElementType() != getType().getElementType())
    return emitOpError() << "operand and result element types differ";
  return success();
}

//===----------------------------------------------------------------------===//
// ReduceSumOp / ReduceMaxOp
//===----------------------------------------------------------------------===//

/// Shared verifier: dims sorted, unique, in range; result = input shape
/// without the reduced dims; same element type.
static LogicalResult verifyReduce(mlir::Operation *op, llvm::ArrayRef<int64_t> dims, RankedTensorType in,
                                  RankedTensorType out) {
  int64_t previous = -1;
  for (int64_t dim : dims) {
    if (dim <= previous || dim >= in.getRank())
      return op->emitOpError() << "dims " << shapeString(dims) << " must be sorted, unique and in [0, " << in.getRank()
                               << ") for operand shape " << shapeString(in.getShape());
    previous = dim;
  }
  llvm::SmallVector<int64_t> expected;
  for (int64_t i = 0; i < in.getRank(); ++i)
    if (!llvm::is_contained(dims, i))
      expected.push_back(in.getDimSize(i));
  if (llvm::ArrayRef<int64_t>(expected) != out.getShape())
    return op->emitOpError() << "result shape " << shapeString(out.getShape()) << " should be " << shapeString(expected)
                             << " (operand " << shapeString(in.getShape()) << " reduced over " << shapeString(dims)
                             << ")";
  if (in.getElementType() != out.getElementType())
    return op->emitOpError() << "operand and result element types differ";
  return success();
}

LogicalResult ReduceSumOp::verify() { return verifyReduce(*this, getDims(), tensorTypeOf(getInput()), getType()); }

LogicalResult ReduceMaxOp::verify() { return verifyReduce(*this, getDims(), tensorTypeOf(getInput()), getType()); }

LogicalResult ReduceMinOp::verify() { return verifyReduce(*this, getDims(), tensorTypeOf(getInput()), getType()); }

//===----------------------------------------------------------------------===//
// ArgMaxOp / ArgMinOp / CumsumOp
//===----------------------------------------------------------------------===//

/// `dims` holds exactly one dim in [0, rank).
static LogicalResult verifyOneDim(mlir::Operation *op, llvm::ArrayRef<int64_t> dims, RankedTensorType in) {
  if (dims.size() != 1 || dims[0] < 0 || dims[0] >= in.getRank())
    return op->emitOpError() << "dims " << shapeString(dims) << " must be exactly one dim in [0, " << in.getRank()
                             << ") for operand shape " << shapeString(in.getShape());
  return success();
}

/// Shared verifier of kiln.argmax / kiln.argmin: one dim, dropped from the
/// i64 result.
static LogicalResult verifyArgReduce(mlir::Operation *op, llvm::ArrayRef<int64_t> dims, RankedTensorType in,
                                     RankedTensorType out) {
  if (failed(verifyOneDim(op, dims, in)))
    return failure();
  llvm::SmallVector<int64_t> expected(in.getShape());
  expected.erase(expected.begin() + dims[0]);
  if (llvm::ArrayRef<int64_t>(expected) != out.getShape())
    return op->emitOpError() << "result shape " << shapeString(out.getShape()) << " should be " << shapeString(expected)
                             << " (operand " << shapeString(in.getShape()) << " reduced over " << shapeString(dims)
                             << ")";
  return success();
}

LogicalResult ArgMaxOp::verify() { return verifyArgReduce(*this, getDims(), tensorTypeOf(getInput()), getType()); }

LogicalResult ArgMinOp::verify() { return verifyArgReduce(*this, getDims(), tensorTypeOf(getInput()), getType()); }

LogicalResult CumsumOp::verify() { return verifyOneDim(*this, getDims(), tensorTypeOf(getInput())); }

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

/// The shape rule of gather and scatter_add: `index` has `of`'s rank and is
/// no larger than it in every dimension (but `dim` unless `allDims`).
static LogicalResult verifyIndexShape(mlir::Operation *op, RankedTensorType index, RankedTensorType of,
                                      int64_t dim, bool allDims, llvm::StringRef what) {
  if (index.getRank() != of.getRank())
    return op->emitOpError() << "index " << shapeString(index.getShape()) << " must have the rank of " << what << " "
                             << shapeString(of.getShape());
  for (int64_t d = 0; d < of.getRank(); ++d)
    if ((allDims || d != dim) && index.getDimSize(d) > of.getDimSize(d))
      return op->emitOpError() << "index " << shapeString(index.getShape()) << " is larger than " << what << " "
                               << shapeString(of.getShape()) << " in dimension " << d;
  return success();
}

static LogicalResult verifyIndexDim(mlir::Operation *op, int64_t dim, RankedTensorType input) {
  if (dim < 0 || dim >= std::max<int64_t>(input.getRank(), 1) || input.getRank() == 0)
    return op->emitOpError() << "dim " << dim << " is outside [0, " << input.getRank() << ") for input "
                             << shapeString(input.getShape());
  return success();
}

LogicalResult GatherOp::verify() {
  auto input = tensorTypeOf(getInput()), index = tensorTypeOf(getIndex());
  if (failed(verifyIndexDim(*this, getDim(), input)))
    return failure();
  if (getType().getShape() != index.getShape())
    return emitOpError() << "result " << shapeString(getType().getShape()) << " must have the index's shape "
                         << shapeString(index.getShape());
  if (getSource() != "gather" && getSource() != "index_select" && getSource() != "embedding")
    return emitOpError() << "source must be \"gather\", \"index_select\" or \"embedding\", got \"" << getSource()
                         << "\"";
  return verifyIndexShape(*this, index, input, getDim(), /*allDims=*/false, "input");
}

LogicalResult ScatterAddOp::verify() {
  auto input = tensorTypeOf(getInput()), index = tensorTypeOf(getIndex()), src = tensorTypeOf(getSrc());
  if (failed(verifyIndexDim(*this, getDim(), input)))
    return failure();
  if (failed(verifyIndexShape(*this, index, input, getDim(), /*allDims=*/false, "input")))
    return failure();
  return verifyIndexShape(*this, index, src, getDim(), /*allDims=*/true, "src");
}

//===----------------------------------------------------------------------===//
// FusionOp
//===----------------------------------------------------------------------===//

YieldOp FusionOp::getYield() { return mlir::cast<YieldOp>(getBodyBlock().getTerminator()); }

LogicalResult FusionOp::verify() {
  mlir::Block &block = getBodyBlock();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError() << "body has " << block.getNumArguments() << " arguments but the op has " << getInputs().size()
                         << " operands";
  for (auto [index, pair] : llvm::enumerate(llvm::zip(block.getArguments(), getInputs()))) {
    auto [argument, operand] = pair;
    if (argument.getType() != operand.getType())
      return emitOpError() << "body argument #" << index << " has type " << argument.getType() << " but operand #"
                           << index << " has type " << operand.getType();
  }
  if (block.empty() || !mlir::isa<YieldOp>(block.back()))
    return emitOpError() << "body must end with kiln.yield";
  YieldOp yield = getYield();
  if (yield.getValues().size() != getNumResults())
    return emitOpError() << "kiln.yield has " << yield.getValues().size() << " operands but the op has "
                         << getNumResults() << " results";
  for (auto [index, pair] : llvm::enumerate(llvm::zip(yield.getValues(), getResults()))) {
    auto [yielded, result] = pair;
    if (yielded.getType() != result.getType())
      return emitOpError() << "kiln.yield operand #" << index << " has type " << yielded.getType() << " but result #"
                           << index << " has type " << result.getType();
  }
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : block.without_terminator()) {
    if (!isFusibleOp(&op))
      return emitOpError() << "body may not contain '" << op.getName()
                           << "' (only kiln.constant, elementwise ops, reductions, kiln.gather, kiln.scatter_add, "
                              "and kiln.reshape / kiln.broadcast in a row fusion)";
    ops.push_back(&op);
  }
  if (isRowFusionBody(block)) {
    std::string why;
    if (mlir::failed(rowSpaceOf(ops, &why)))
      return emitOpError() << "body has layout ops but is not a row fusion: " << why;
  }
  return success();
}

} // namespace kiln::ir
