// The operand ABI of kernels, shared by every target: the dtype an element
// type is stored as, the strides operands have at run time, the memory root
// of a view, and which results may take over an operand's memory.
#include "KernelAbi.h"

#include <functional>

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln::codegen {

using namespace mlir;

FailureOr<DType> dtypeOf(Type element) {
  if (element.isF32())
    return DType::Float32;
  if (element.isF16())
    return DType::Float16;
  if (element.isBF16())
    return DType::BFloat16;
  if (element.isInteger(64))
    return DType::Int64;
  if (element.isInteger(1))
    return DType::Bool;
  if (element.isF64())
    return DType::Float64;
  if (element.isInteger(32))
    return DType::Int32;
  return failure();
}

Value memoryRoot(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    if (!ir::isLayoutOp(op) || op->getNumOperands() == 0)
      break;
    value = op->getOperand(0);
  }
  return value;
}

namespace {

/// Element strides of `v` at run time (see operandStrides).
std::vector<int64_t> stridesOf(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  std::vector<int64_t> sizes(type.getShape().begin(), type.getShape().end());
  Operation *def = v.getDefiningOp();
  if (!def)
    return runtime::contiguous_strides(sizes);
  if (auto t = dyn_cast<ir::TransposeOp>(def)) {
    std::vector<int64_t> in = stridesOf(t.getInput()), out;
    for (int64_t p : t.getPermutation())
      out.push_back(in[p]);
    return out;
  }
  if (auto bc = dyn_cast<ir::BroadcastOp>(def)) {
    auto inType = cast<RankedTensorType>(bc.getInput().getType());
    std::vector<int64_t> in = stridesOf(bc.getInput()), out(sizes.size(), 0);
    const size_t rank = sizes.size(), brank = inType.getRank();
    for (size_t i = 0; i < brank; ++i) {
      size_t d = rank - brank + i;
      out[d] = inType.getDimSize(i) == sizes[d] ? in[i] : 0;
    }
    return out;
  }
  if (auto r = dyn_cast<ir::ReshapeOp>(def)) {
    auto inType = cast<RankedTensorType>(r.getInput().getType());
    std::vector<int64_t> inSizes(inType.getShape().begin(), inType.getShape().end()), out;
    if (runtime::compute_view_strides(inSizes, stridesOf(r.getInput()), sizes, &out))
      return out;
    return runtime::contiguous_strides(sizes);
  }
  return runtime::contiguous_strides(sizes); // kernel / GEMM results, copies
}

} // namespace

std::vector<std::vector<int64_t>> operandStrides(ir::FusionOp fusion) {
  std::vector<std::vector<int64_t>> strides;
  for (Value v : fusion.getInputs())
    strides.push_back(stridesOf(v));
  return strides;
}

std::vector<runtime::IndexCheck> indexChecks(ir::FusionOp fusion) {
  std::vector<runtime::IndexCheck> checks;
  for (Operation &op : fusion.getBodyBlock().without_terminator()) {
    if (auto gather = dyn_cast<ir::GatherOp>(op)) {
      const int64_t dim = gather.getDim();
      checks.push_back({gather.getSource().str(), dim, cast<RankedTensorType>(gather.getInput().getType()).getDimSize(dim)});
    } else if (auto scatter = dyn_cast<ir::ScatterAddOp>(op)) {
      const int64_t dim = scatter.getDim();
      checks.push_back({"scatter_add", dim, cast<RankedTensorType>(scatter.getInput().getType()).getDimSize(dim)});
    }
  }
  return checks;
}

std::vector<runtime::InPlace> inPlacePairs(ir::FusionOp fusion) {
  if (!ir::isElementwiseFusion(fusion))
    return {};
  // Whether `v` or a view of it is read by an op after `fusion` (or
  // returned).
  Block *block = fusion->getBlock();
  std::function<bool(Value)> readLater = [&](Value v) {
    for (Operation *user : v.getUsers()) {
      Operation *top = block->findAncestorOpInBlock(*user);
      if (!top)
        continue;
      if (isa<func::ReturnOp>(top))
        return true;
      if (ir::isLayoutOp(top) ? readLater(top->getResult(0)) : fusion->isBeforeInBlock(top))
        return true;
    }
    return false;
  };
  const std::vector<std::vector<int64_t>> strides = operandStrides(fusion);
  auto dies = [&](unsigned k) {
    Value operand = fusion.getInputs()[k];
    auto type = cast<RankedTensorType>(operand.getType());
    if (strides[k] != runtime::contiguous_strides({type.getShape().begin(), type.getShape().end()}))
      return false;
    Value root = memoryRoot(operand);
    if (auto argument = dyn_cast<BlockArgument>(root)) {
      auto func = dyn_cast<func::FuncOp>(argument.getOwner()->getParentOp());
      auto role = func ? func.getArgAttrOfType<StringAttr>(argument.getArgNumber(), "kiln.role") : StringAttr();
      if (!role || role.getValue() != "saved")
        return false;
    } else if (root.getDefiningOp()->getBlock() != block) {
      return false;
    }
    for (auto [j, other] : llvm::enumerate(fusion.getInputs()))
      if (j != k && memoryRoot(other) == root)
        return false;
    return !readLater(root);
  };
  std::vector<runtime::InPlace> pairs;
  for (auto [operand, result] : ir::inPlaceOperandPairs(fusion, dies))
    pairs.push_back({operand, result});
  return pairs;
}

} // namespace kiln::codegen
