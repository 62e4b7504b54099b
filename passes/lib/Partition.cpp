// kiln-partition: split func @joint into @forward and @backward.
//
// Recipe: find @joint; mark the forward set (backward slice of the forward
// outputs) and the backward set (slice of the gradient outputs minus the
// forward set); decide for every forward value backward uses whether to
// re-materialize it (layout ops and constants over primals) or save it;
// build @forward and @backward by cloning in program order; erase @joint.
#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-partition"

namespace kiln::passes {
#define GEN_PASS_DEF_KILNPARTITIONPASS
#include "kiln/passes/Passes.h.inc"
} // namespace kiln::passes

namespace kiln::passes {
namespace {

using OpSet = llvm::DenseSet<mlir::Operation *>;

static bool isTangent(mlir::func::FuncOp func, unsigned index) {
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

/// The function split: which forward values backward recomputes or loads.
struct Split {
  OpSet forward;                      // ops of @forward
  OpSet backward;                     // ops of @backward (incl. re-materialized)
  llvm::SetVector<mlir::Value> saved; // program order
};

class Partitioner {
public:
  explicit Partitioner(mlir::func::FuncOp joint) : joint_(joint) {}

  mlir::LogicalResult run();

private:
  bool canRematerialize(mlir::Value value);
  void rematerialize(mlir::Value value, Split &split);
  mlir::LogicalResult computeSplit(Split &split);
  mlir::func::FuncOp buildForward(mlir::OpBuilder &builder, const Split &split);
  mlir::func::FuncOp buildBackward(mlir::OpBuilder &builder, const Split &split);

  mlir::func::FuncOp joint_;
  unsigned numForwardOutputs_ = 0;
  llvm::DenseMap<mlir::Value, bool> rematCache_;
  OpSet forwardOps_;
};

/// A forward value is re-materialized when it is a primal argument, or a
/// layout op / constant whose operands can all be re-materialized.
bool Partitioner::canRematerialize(mlir::Value value) {
  if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(value))
    return !isTangent(joint_, arg.getArgNumber());
  auto found = rematCache_.find(value);
  if (found != rematCache_.end())
    return found->second;
  mlir::Operation *op = value.getDefiningOp();
  bool cheap = mlir::isa<ir::ConstantOp>(op) || ir::isLayoutOp(op);
  bool result = cheap && llvm::all_of(op->getOperands(), [&](mlir::Value v) { return canRematerialize(v); });
  rematCache_[value] = result;
  return result;
}

void Partitioner::rematerialize(mlir::Value value, Split &split) {
  mlir::Operation *op = value.getDefiningOp();
  if (!op || !split.backward.insert(op).second)
    return;
  for (mlir::Value operand : op->getOperands())
    rematerialize(operand, split);
}

mlir::LogicalResult Partitioner::computeSplit(Split &split) {
  auto ret = mlir::cast<mlir::func::ReturnOp>(joint_.getBody().front().getTerminator());
  auto outputs = ret.getOperands();
  for (mlir::Value output : outputs.take_front(numForwardOutputs_))
    if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(output))
      if (isTangent(joint_, arg.getArgNumber()))
        return ret.emitOpError() << "returns tangent argument #" << arg.getArgNumber() << " as a forward output";
  collectAncestors(llvm::to_vector(outputs.take_front(numForwardOutputs_)), split.forward);
  for (mlir::Operation &op : joint_.getBody().front().without_terminator()) {
    if (!split.forward.contains(&op))
      continue;
    for (mlir::Value operand : op.getOperands())
      if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(operand))
        if (isTangent(joint_, arg.getArgNumber()))
          return op.emitOpError() << "computes a forward output but uses tangent argument #" << arg.getArgNumber();
  }

  OpSet gradientSlice;
  collectAncestors(llvm::to_vector(outputs.drop_front(numForwardOutputs_)), gradientSlice);
  for (mlir::Operation *op : gradientSlice)
    if (!split.forward.contains(op))
      split.backward.insert(op);

  // Forward values that backward needs: its ops' operands and the gradients
  // returned directly.
  llvm::SmallVector<mlir::Value> needed;
  for (mlir::Operation &op : joint_.getBody().front().without_terminator())
    if (split.backward.contains(&op))
      for (mlir::Value operand : op.getOperands())
        needed.push_back(operand);
  for (mlir::Value gradient : outputs.drop_front(numForwardOutputs_))
    needed.push_back(gradient);

  llvm::DenseSet<mlir::Value> toSave;
  for (mlir::Value value : needed) {
    mlir::Operation *producer = value.getDefiningOp();
    if (!producer || !split.forward.contains(producer))
      continue; // an argument, or computed in backward anyway
    if (canRematerialize(value))
      rematerialize(value, split);
    else
      toSave.insert(value);
  }
  // Saved values in program order.
  for (mlir::Operation &op : joint_.getBody().front().without_terminator())
    for (mlir::Value result : op.getResults())
      if (toSave.contains(result))
        split.saved.insert(result);
  LLVM_DEBUG(llvm::dbgs() << "kiln-partition: " << split.forward.size() << " forward ops, " << split.backward.size()
                          << " backward ops, " << split.saved.size() << " saved\n");
  return mlir::success();
}

/// Clones the ops of `body` that are in `ops` (program order) with `mapping`.
static void cloneInOrder(mlir::OpBuilder &builder, mlir::Block &body, const OpSet &ops, mlir::IRMapping &mapping) {
  for (mlir::Operation &op : body.without_terminator())
    if (ops.contains(&op))
      builder.clone(op, mapping);
}

mlir::func::FuncOp Partitioner::buildForward(mlir::OpBuilder &builder, const Split &split) {
  mlir::Block &body = joint_.getBody().front();
  auto ret = mlir::cast<mlir::func::ReturnOp>(body.getTerminator());
  llvm::SmallVector<mlir::Type> argTypes, resultTypes;
  llvm::SmallVector<unsigned> primalIndices;
  for (mlir::BlockArgument arg : body.getArguments())
    if (!isTangent(joint_, arg.getArgNumber())) {
      argTypes.push_back(arg.getType());
      primalIndices.push_back(arg.getArgNumber());
    }
  llvm::SmallVector<mlir::Value> results(ret.getOperands().take_front(numForwardOutputs_));
  results.append(split.saved.begin(), split.saved.end());
  for (mlir::Value value : results)
    resultTypes.push_back(value.getType());

  auto func =
      builder.create<mlir::func::FuncOp>(joint_.getLoc(), "forward", builder.getFunctionType(argTypes, resultTypes));
  func->setAttr("kiln.num_forward_outputs", builder.getI64IntegerAttr(numForwardOutputs_));
  func->setAttr("kiln.num_saved", builder.getI64IntegerAttr(split.saved.size()));
  mlir::Block *entry = func.addEntryBlock();
  mlir::IRMapping mapping;
  for (auto [newIndex, oldIndex] : llvm::enumerate(primalIndices)) {
    func.setArgAttr(newIndex, "kiln.role", builder.getStringAttr("primal"));
    mapping.map(body.getArgument(oldIndex), entry->getArgument(newIndex));
  }
  mlir::OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(entry);
  cloneInOrder(builder, body, split.forward, mapping);
  llvm::SmallVector<mlir::Value> mapped;
  for (mlir::Value value : results)
    mapped.push_back(mapping.lookup(value));
  builder.create<mlir::func::ReturnOp>(ret.getLoc(), mapped);
  return func;
}

mlir::func::FuncOp Partitioner::buildBackward(mlir::OpBuilder &builder, const Split &split) {
  mlir::Block &body = joint_.getBody().front();
  auto ret = mlir::cast<mlir::func::ReturnOp>(body.getTerminator());
  // Argument order: primals, saved, tangents (roles name each group).
  llvm::SmallVector<mlir::Value> oldArgs;
  llvm::SmallVector<llvm::StringRef> roles;
  for (mlir::BlockArgument arg : body.getArguments())
    if (!isTangent(joint_, arg.getArgNumber())) {
      oldArgs.push_back(arg);
      roles.push_back("primal");
    }
  for (mlir::Value value : split.saved) {
    oldArgs.push_back(value);
    roles.push_back("saved");
  }
  for (mlir::BlockArgument arg : body.getArguments())
    if (isTangent(joint_, arg.getArgNumber())) {
      oldArgs.push_back(arg);
      roles.push_back("tangent");
    }
  llvm::SmallVector<mlir::Type> argTypes, resultTypes;
  for (mlir::Value value : oldArgs)
    argTypes.push_back(value.getType());
  auto gradients = ret.getOperands().drop_front(numForwardOutputs_);
  for (mlir::Value value : gradients)
    resultTypes.push_back(value.getType());

  auto func =
      builder.create<mlir::func::FuncOp>(joint_.getLoc(), "backward", builder.getFunctionType(argTypes, resultTypes));
  func->setAttr("kiln.num_saved", builder.getI64IntegerAttr(split.saved.size()));
  mlir::Block *entry = func.addEntryBlock();
  mlir::IRMapping mapping;
  for (auto [index, value] : llvm::enumerate(oldArgs)) {
    func.setArgAttr(index, "kiln.role", builder.getStringAttr(roles[index]));
    mapping.map(value, entry->getArgument(index));
  }
  mlir::OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(entry);
  cloneInOrder(builder, body, split.backward, mapping);
  llvm::SmallVector<mlir::Value> mapped;
  for (mlir::Value value : gradients)
    mapped.push_back(mapping.lookup(value));
  builder.create<mlir::func::ReturnOp>(ret.getLoc(), mapped);
  return func;
}

mlir::LogicalResult Partitioner::run() {
  if (!llvm::hasSingleElement(joint_.getBody()))
    return joint_.emitOpError() << "@joint must have a single block";
  auto ret = mlir::dyn_cast<mlir::func::ReturnOp>(joint_.getBody().front().getTerminator());
  if (!ret)
    return joint_.emitOpError() << "@joint must end with func.return";
  unsigned numResults = ret.getNumOperands();
  numForwardOutputs_ = numResults;
  if (auto attr = joint_->getAttrOfType<mlir::IntegerAttr>("kiln.num_forward_outputs")) {
    int64_t value = attr.getInt();
    if (value < 0 || value > static_cast<int64_t>(numResults))
      return joint_.emitOpError() << "kiln.num_forward_outputs = " << value << " but @joint has " << numResults
                                  << " results";
    numForwardOutputs_ = static_cast<unsigned>(value);
  }
  bool hasTangents = false;
  for (unsigned i = 0; i < joint_.getNumArguments(); ++i)
    hasTangents |= isTangent(joint_, i);

  mlir::OpBuilder builder(joint_);
  if (!hasTangents && numForwardOutputs_ == numResults) {
    // Forward-only graph: nothing to split.
    joint_.setSymName("forward");
    joint_->setAttr("kiln.num_forward_outputs", builder.getI64IntegerAttr(numForwardOutputs_));
    joint_->setAttr("kiln.num_saved", builder.getI64IntegerAttr(0));
    return mlir::success();
  }
  Split split;
  if (mlir::failed(computeSplit(split)))
    return mlir::failure();
  buildForward(builder, split);
  buildBackward(builder, split);
  joint_.erase();
  return mlir::success();
}

struct KilnPartitionPass : public impl::KilnPartitionPassBase<KilnPartitionPass> {
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto joint = module.lookupSymbol<mlir::func::FuncOp>("joint");
    if (!joint)
      return; // nothing to partition (already split, or a hand-written test)
    if (module.lookupSymbol("forward") || module.lookupSymbol("backward")) {
      joint.emitOpError() << "module already has @forward or @backward";
      return signalPassFailure();
    }
    Partitioner partitioner(joint);
    if (mlir::failed(partitioner.run()))
      signalPassFailure();
  }
};

} // namespace
} // namespace kiln::passes
