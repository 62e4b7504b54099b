// kiln-fuse: group elementwise ops and reductions into kiln.fusion regions.
//
// Recipe, per func.func (program order of the module): form groups by a
// reverse walk (rules below and in passes/README.md), outline each group into
// a kiln.fusion placed at its root, wrap constants still used outside
// fusions, then name every kernel of the module fusion_0, fusion_1, ... in
// order of appearance.
#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-fuse"

namespace kiln::passes {
#define GEN_PASS_DEF_KILNFUSEPASS
#include "kiln/passes/Passes.h.inc"
} // namespace kiln::passes

namespace kiln::passes {
namespace {

/// Ops that seed a group: elementwise ops and reductions (not constants,
/// which are cloned into the fusions that use them).
static bool isComputeOp(mlir::Operation *op) { return ir::isElementwiseOp(op) || ir::isReductionOp(op); }

static llvm::ArrayRef<int64_t> shapeOf(mlir::Value value) {
  return mlir::cast<mlir::RankedTensorType>(value.getType()).getShape();
}

/// The iteration space of a group rooted at `seed`: the operand shape of a
/// reduction, otherwise the result shape.
static llvm::ArrayRef<int64_t> iterationSpace(mlir::Operation *seed) {
  if (ir::isReductionOp(seed))
    return shapeOf(seed->getOperand(0));
  return shapeOf(seed->getResult(0));
}

/// One fusion group: the root (its only externally used op) and the members
/// in program order.
struct Group {
  mlir::Operation *root = nullptr;
  llvm::SmallVector<mlir::Operation *> members;
};

/// Forms the groups of `block` (see the file comment for the rules).
static std::vector<Group> formGroups(mlir::Block &block) {
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : block.without_terminator())
    ops.push_back(&op);
  llvm::DenseSet<mlir::Operation *> assigned;
  std::vector<Group> groups;
  for (int seedIndex = static_cast<int>(ops.size()) - 1; seedIndex >= 0; --seedIndex) {
    mlir::Operation *seed = ops[seedIndex];
    if (!isComputeOp(seed) || assigned.contains(seed))
      continue;
    llvm::ArrayRef<int64_t> space = iterationSpace(seed);
    llvm::SetVector<mlir::Operation *> members;
    members.insert(seed);
    // Users come after producers, so by the time a producer is visited all
    // of its users have been decided.
    for (int i = seedIndex - 1; i >= 0; --i) {
      mlir::Operation *producer = ops[i];
      if (assigned.contains(producer) || !ir::isElementwiseOp(producer) || shapeOf(producer->getResult(0)) != space ||
          producer->getResult(0).use_empty())
        continue;
      bool allUsersInGroup =
          llvm::all_of(producer->getUsers(), [&](mlir::Operation *user) { return members.contains(user); });
      if (allUsersInGroup)
        members.insert(producer);
    }
    Group group;
    group.root = seed;
    group.members.assign(members.rbegin(), members.rend());
    for (mlir::Operation *op : group.members)
      assigned.insert(op);
    groups.push_back(std::move(group));
  }
  std::reverse(groups.begin(), groups.end());
  return groups;
}

/// Replaces `group` by one kiln.fusion at the root's position. Constants
/// used by members are cloned into the body; other external values become
/// operands (in order of first use).
static void outlineGroup(const Group &group) {
  llvm::DenseSet<mlir::Operation *> memberSet(group.members.begin(), group.members.end());
  llvm::SetVector<mlir::Value> inputs;
  llvm::SetVector<mlir::Operation *> constants;
  for (mlir::Operation *op : group.members)
    for (mlir::Value operand : op->getOperands()) {
      mlir::Operation *producer = operand.getDefiningOp();
      if (producer && memberSet.contains(producer))
        continue;
      if (producer && mlir::isa<ir::ConstantOp>(producer))
        constants.insert(producer);
      else
        inputs.insert(operand);
    }

  mlir::OpBuilder builder(group.root);
  auto fusion = builder.create<ir::FusionOp>(group.root->getLoc(), group.root->getResultTypes(),
                                             builder.getStringAttr("fusion"), inputs.getArrayRef());
  mlir::Block *body = builder.createBlock(&fusion.getBody());
  mlir::IRMapping mapping;
  for (mlir::Value input : inputs)
    mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
  builder.setInsertionPointToEnd(body);
  for (mlir::Operation *constant : constants)
    builder.clone(*constant, mapping);
  for (mlir::Operation *op : group.members)
    builder.clone(*op, mapping);
  llvm::SmallVector<mlir::Value> yielded;
  for (mlir::Value result : group.root->getResults())
    yielded.push_back(mapping.lookup(result));
  builder.create<ir::YieldOp>(group.root->getLoc(), yielded);

  group.root->replaceAllUsesWith(fusion.getResults());
  for (mlir::Operation *op : llvm::reverse(group.members))
    op->erase();
}

/// Erases unused constants and wraps each constant still used outside a
/// fusion (returned, fed to a matmul or a layout op) in its own fusion.
static void wrapLeftoverConstants(mlir::Block &block) {
  llvm::SmallVector<ir::ConstantOp> constants;
  for (mlir::Operation &op : block)
    if (auto constant = mlir::dyn_cast<ir::ConstantOp>(op))
      constants.push_back(constant);
  for (ir::ConstantOp constant : constants) {
    if (constant->use_empty()) {
      constant->erase();
      continue;
    }
    mlir::OpBuilder builder(constant);
    auto fusion = builder.create<ir::FusionOp>(constant.getLoc(), mlir::TypeRange(constant.getType()),
                                               builder.getStringAttr("fusion"), mlir::ValueRange());
    mlir::Block *body = builder.createBlock(&fusion.getBody());
    builder.setInsertionPointToEnd(body);
    mlir::Operation *clone = builder.clone(*constant);
    builder.create<ir::YieldOp>(constant.getLoc(), clone->getResults());
    constant->replaceAllUsesWith(fusion->getResults());
    constant->erase();
  }
}

static void fuseFunction(mlir::func::FuncOp func) {
  for (mlir::Block &block : func.getBody()) {
    std::vector<Group> groups = formGroups(block);
    LLVM_DEBUG(llvm::dbgs() << "kiln-fuse: @" << func.getSymName() << ": " << groups.size() << " groups\n");
    for (const Group &group : groups)
      outlineGroup(group);
    wrapLeftoverConstants(block);
  }
}

/// Names the kernels fusion_0, fusion_1, ... in module order.
static void nameKernels(mlir::ModuleOp module) {
  int next = 0;
  module.walk([&](ir::FusionOp fusion) { fusion.setKernel("fusion_" + std::to_string(next++)); });
}

struct KilnFusePass : public impl::KilnFusePassBase<KilnFusePass> {
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    for (auto func : module.getOps<mlir::func::FuncOp>())
      if (!func.isExternal())
        fuseFunction(func);
    nameKernels(module);
  }
};

} // namespace
} // namespace kiln::passes
