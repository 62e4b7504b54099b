// JointGraph.cpp - slices of func @joint and the cost model shared by
// kiln-remat and kiln-partition.
#include "JointGraph.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/KilnOps.h"
#include "kiln/ir/OpTable.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace kiln::passes {

bool isTangentArgument(mlir::func::FuncOp func, unsigned index) {
  auto role = func.getArgAttrOfType<mlir::StringAttr>(index, "kiln.role");
  return role && role.getValue() == "tangent";
}

/// Adds to `slice` every op (of the function body) that `roots` depend on.
static void collectAncestors(llvm::ArrayRef<mlir::Value> roots, OpSet &slice) {
  llvm::SmallVector<mlir::Value> worklist(roots.begin(), roots.end());
  while (!worklist.empty()) {
    mlir::Operation *op = worklist.pop_back_val().getDefiningOp();
    if (!op || !slice.insert(op).second)
      continue;
    for (mlir::Value operand : op->getOperands())
      worklist.push_back(operand);
  }
}

mlir::LogicalResult analyzeJoint(mlir::func::FuncOp joint, JointSlices &slices) {
  if (!llvm::hasSingleElement(joint.getBody()))
    return joint.emitOpError() << "@joint must have a single block";
  mlir::Block &body = joint.getBody().front();
  auto ret = mlir::dyn_cast<mlir::func::ReturnOp>(body.getTerminator());
  if (!ret)
    return joint.emitOpError() << "@joint must end with func.return";
  unsigned numResults = ret.getNumOperands();
  slices.numForwardOutputs = numResults;
  if (auto attr = joint->getAttrOfType<mlir::IntegerAttr>("kiln.num_forward_outputs")) {
    int64_t value = attr.getInt();
    if (value < 0 || value > static_cast<int64_t>(numResults))
      return joint.emitOpError() << "kiln.num_forward_outputs = " << value << " but @joint has " << numResults
                                 << " results";
    slices.numForwardOutputs = static_cast<unsigned>(value);
  }
  bool hasTangents = false;
  for (unsigned i = 0; i < joint.getNumArguments(); ++i)
    hasTangents |= isTangentArgument(joint, i);
  if (!hasTangents && slices.numForwardOutputs == numResults) {
    slices.forwardOnly = true;
    return mlir::success();
  }

  auto outputs = ret.getOperands();
  for (mlir::Value output : outputs.take_front(slices.numForwardOutputs)) {
    if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(output))
      if (isTangentArgument(joint, arg.getArgNumber()))
        return ret.emitOpError() << "returns tangent argument #" << arg.getArgNumber() << " as a forward output";
    slices.forwardOutputs.insert(output);
  }
  collectAncestors(llvm::to_vector(outputs.take_front(slices.numForwardOutputs)), slices.forward);
  for (mlir::Operation &op : body.without_terminator()) {
    if (!slices.forward.contains(&op))
      continue;
    for (mlir::Value operand : op.getOperands())
      if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(operand))
        if (isTangentArgument(joint, arg.getArgNumber()))
          return op.emitOpError() << "computes a forward output but uses tangent argument #" << arg.getArgNumber();
  }

  OpSet gradientSlice;
  collectAncestors(llvm::to_vector(outputs.drop_front(slices.numForwardOutputs)), gradientSlice);
  for (mlir::Operation *op : gradientSlice)
    if (!slices.forward.contains(op))
      slices.backward.insert(op);

  // Forward values backward reads: its ops' operands and the gradients
  // returned directly.
  llvm::DenseSet<mlir::Value> reads;
  for (mlir::Operation &op : body.without_terminator())
    if (slices.backward.contains(&op))
      for (mlir::Value operand : op.getOperands())
        reads.insert(operand);
  for (mlir::Value gradient : outputs.drop_front(slices.numForwardOutputs))
    reads.insert(gradient);
  for (mlir::Operation &op : body.without_terminator())
    if (slices.forward.contains(&op))
      for (mlir::Value result : op.getResults())
        if (reads.contains(result))
          slices.needed.insert(result);
  return mlir::success();
}

int64_t valueBytes(mlir::Value value) {
  auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  int64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  return tensor.getNumElements() * ((bits + 7) / 8);
}

static int64_t numElements(mlir::Value value) {
  auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  return tensor && tensor.hasStaticShape() ? tensor.getNumElements() : 0;
}

/// The FlopModel of `op`'s row in Ops.def (Free for ops outside the table).
static ir::FlopModel flopModelOf(mlir::Operation *op) {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  if (mlir::isa<ir::OpClass>(op))                                                                                  \
    return ir::FlopModel::flops;
#include "kiln/ir/Ops.def"
  return ir::FlopModel::Free;
}

/// 2 * N * Cout * Hout * Wout * (Cin / groups) * kH * kW of a conv op (the
/// forward's count for all three, as torch.utils.flop_counter's
/// conv_backward_flop): the output-shaped tensor is the forward's result,
/// the input gradient's operand 0, the weight gradient's operand 1; the
/// weight-shaped one is operand 1, or the weight gradient's result.
static int64_t convFlops(mlir::Operation *op) {
  mlir::Value output = op->getResult(0), weight = op->getOperand(1);
  if (mlir::isa<ir::Conv2dInputGradOp>(op))
    output = op->getOperand(0);
  if (mlir::isa<ir::Conv2dWeightGradOp>(op)) {
    output = op->getOperand(1);
    weight = op->getResult(0);
  }
  auto w = mlir::cast<mlir::RankedTensorType>(weight.getType()).getShape();
  return 2 * numElements(output) * w[1] * w[2] * w[3];
}

int64_t opFlops(mlir::Operation *op) {
  switch (flopModelOf(op)) {
  case ir::FlopModel::Matmul: {
    auto lhs = mlir::cast<mlir::RankedTensorType>(op->getOperand(0).getType());
    int64_t k = lhs.getShape().back();
    return 2 * numElements(op->getResult(0)) * k;
  }
  case ir::FlopModel::Conv:
    return convFlops(op);
  case ir::FlopModel::Operand:
    return numElements(op->getOperand(0));
  case ir::FlopModel::Result:
    return numElements(op->getResult(0));
  case ir::FlopModel::Free:
    return 0; // constants, layout ops (views)
  }
  return 0;
}

bool isCheapToRecompute(mlir::Operation *op) {
  if (!isRecomputable(op))
    return false;
  if (mlir::isa<ir::ConstantOp>(op) || ir::isLayoutOp(op) || ir::isElementwiseOp(op))
    return true;
  if (ir::isReductionOp(op))
    return 4 * valueBytes(op->getResult(0)) >= valueBytes(op->getOperand(0));
  return false;
}

bool isRecomputable(mlir::Operation *op) {
  return op->getNumRegions() == 0 && mlir::isa<ir::KilnDialect>(op->getDialect()) && mlir::isPure(op);
}

} // namespace kiln::passes
