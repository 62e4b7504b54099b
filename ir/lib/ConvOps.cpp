// Verifiers of the convolution and pooling ops (KilnOps.td, "Convolution and
// pooling"): shapes as PyTorch's aten/src/ATen/native/ConvUtils.h
// (conv_output_size) and Pool.h (pooling_output_shape, ceil_mode false).
#include "kiln/ir/KilnOps.h"
#include "ShapeString.h"

#include "llvm/Support/raw_ostream.h"

namespace kiln::ir {

using mlir::failure;
using mlir::LogicalResult;
using mlir::RankedTensorType;
using mlir::success;

namespace {

RankedTensorType typeOf(mlir::Value value) { return mlir::cast<RankedTensorType>(value.getType()); }

/// The attributes of a conv op: two entries each, stride and dilation >= 1,
/// padding >= 0, groups >= 1.
LogicalResult checkConvAttrs(mlir::Operation *op, llvm::ArrayRef<int64_t> stride, llvm::ArrayRef<int64_t> padding,
                             llvm::ArrayRef<int64_t> dilation, int64_t groups) {
  if (stride.size() != 2 || padding.size() != 2 || dilation.size() != 2)
    return op->emitOpError() << "expects 2 entries each in stride, padding and dilation, got "
                             << shapeString(stride) << ", " << shapeString(padding) << ", " << shapeString(dilation);
  if (stride[0] < 1 || stride[1] < 1 || dilation[0] < 1 || dilation[1] < 1 || padding[0] < 0 || padding[1] < 0)
    return op->emitOpError() << "expects stride and dilation >= 1 and padding >= 0, got stride "
                             << shapeString(stride) << ", padding " << shapeString(padding) << ", dilation "
                             << shapeString(dilation);
  if (groups < 1)
    return op->emitOpError() << "expects groups >= 1, got " << groups;
  return success();
}

/// Output size of one spatial axis (may be < 1 for a kernel larger than
/// the padded input).
int64_t convOutputSize(int64_t in, int64_t k, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
}

/// Checks input [N, C, H, W], weight [O, C/groups, kH, kW] and output
/// [N, O, OH, OW] against each other, whichever of them is the op's result.
template <class ConvOp>
LogicalResult verifyConv(ConvOp op, RankedTensorType input, RankedTensorType weight, RankedTensorType output) {
  if (failed(checkConvAttrs(op, op.getStride(), op.getPadding(), op.getDilation(), op.getGroups())))
    return failure();
  auto x = input.getShape(), w = weight.getShape(), y = output.getShape();
  if (x.size() != 4 || w.size() != 4 || y.size() != 4)
    return op.emitOpError() << "expects rank-4 input [N, C, H, W], weight [O, C/groups, kH, kW] and output "
                               "[N, O, OH, OW], got "
                            << shapeString(x) << ", " << shapeString(w) << ", " << shapeString(y);
  const int64_t groups = op.getGroups();
  if (x[1] % groups != 0 || w[0] % groups != 0 || w[1] * groups != x[1])
    return op.emitOpError() << "weight " << shapeString(w) << " with groups = " << groups << " does not match input "
                            << shapeString(x) << " (expected weight [O, " << x[1] / groups << ", kH, kW], O and C "
                            << "divisible by groups)";
  llvm::SmallVector<int64_t, 4> expected{x[0], w[0], 0, 0};
  for (int axis = 0; axis < 2; ++axis)
    expected[2 + axis] = convOutputSize(x[2 + axis], w[2 + axis], op.getStride()[axis], op.getPadding()[axis],
                                        op.getDilation()[axis]);
  if (expected[2] < 1 || expected[3] < 1 || llvm::ArrayRef<int64_t>(expected) != y)
    return op.emitOpError() << "expects output shape " << shapeString(expected) << " for input " << shapeString(x)
                            << " and weight " << shapeString(w) << ", got " << shapeString(y);
  if (input.getElementType() != weight.getElementType() || input.getElementType() != output.getElementType())
    return op.emitOpError() << "expects one element type for input, weight and output";
  return success();
}

/// kernel/stride/padding of a max pool op: 2 entries each, kernel and
/// stride >= 1, 0 <= padding <= kernel / 2.
template <class PoolOp> LogicalResult verifyMaxPool(PoolOp op) {
  auto k = op.getKernel(), s = op.getStride(), p = op.getPadding();
  if (k.size() != 2 || s.size() != 2 || p.size() != 2)
    return op.emitOpError() << "expects 2 entries each in kernel, stride and padding";
  for (int axis = 0; axis < 2; ++axis)
    if (k[axis] < 1 || s[axis] < 1 || p[axis] < 0 || 2 * p[axis] > k[axis])
      return op.emitOpError() << "expects kernel, stride >= 1 and 0 <= padding <= kernel / 2, got kernel "
                              << shapeString(k) << ", stride " << shapeString(s) << ", padding " << shapeString(p);
  auto x = op.getInput().getType().getShape();
  auto y = op.getType().getShape();
  if (x.size() != 4)
    return op.emitOpError() << "expects a rank-4 input [N, C, H, W], got " << shapeString(x);
  llvm::SmallVector<int64_t, 4> expected{x[0], x[1], 0, 0};
  for (int axis = 0; axis < 2; ++axis)
    expected[2 + axis] = convOutputSize(x[2 + axis], k[axis], s[axis], p[axis], 1);
  if (expected[2] < 1 || expected[3] < 1 || llvm::ArrayRef<int64_t>(expected) != y)
    return op.emitOpError() << "expects result shape " << shapeString(expected) << " for input " << shapeString(x)
                            << ", got " << shapeString(y);
  return success();
}

/// `plane` [N, C, H, W] and `windows` [N, C, OH, OW] (indices and the other
/// operand or result): rank 4, one N and C, one float element type.
template <class IndexOp>
LogicalResult verifyPoolIndex(IndexOp op, RankedTensorType plane, RankedTensorType windows) {
  auto indices = typeOf(op.getIndices()).getShape();
  auto big = plane.getShape(), small = windows.getShape();
  if (big.size() != 4 || small.size() != 4 || small != indices)
    return op.emitOpError() << "expects a rank-4 [N, C, H, W] plane and [N, C, OH, OW] windows of the indices' "
                               "shape "
                            << shapeString(indices) << ", got " << shapeString(big) << " and " << shapeString(small);
  if (big[0] != small[0] || big[1] != small[1])
    return op.emitOpError() << "expects one N and C in " << shapeString(big) << " and " << shapeString(small);
  if (typeOf(op.getLhs()).getElementType() != op.getType().getElementType())
    return op.emitOpError() << "expects one element type for lhs and result";
  return success();
}

} // namespace

LogicalResult Conv2dOp::verify() { return verifyConv(*this, typeOf(getLhs()), typeOf(getRhs()), getType()); }

LogicalResult Conv2dInputGradOp::verify() {
  return verifyConv(*this, getType(), typeOf(getRhs()), typeOf(getLhs()));
}

LogicalResult Conv2dWeightGradOp::verify() {
  return verifyConv(*this, typeOf(getLhs()), getType(), typeOf(getRhs()));
}

LogicalResult MaxPool2dOp::verify() {
  if (getInput().getType().getElementType() != getType().getElementType())
    return emitOpError() << "expects one element type for input and result";
  return verifyMaxPool(*this);
}

LogicalResult MaxPool2dIndicesOp::verify() { return verifyMaxPool(*this); }

LogicalResult MaxPool2dBackwardOp::verify() { return verifyPoolIndex(*this, getType(), typeOf(getLhs())); }

LogicalResult MaxPool2dGatherOp::verify() { return verifyPoolIndex(*this, typeOf(getLhs()), getType()); }

} // namespace kiln::ir
