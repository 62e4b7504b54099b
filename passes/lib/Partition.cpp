// kiln-partition: split func @joint into @forward and @backward.
//
// Recipe: slice @joint (JointGraph.h: forward set = backward slice of the
// forward outputs, backward set = slice of the gradients minus the forward
// set); decide for every forward value backward uses whether to recompute
// it in @backward or save it (kiln-remat's `kiln.saved` marks when present,
// else: re-materialize layout ops and constants over primals, save the
// rest); build @forward by cloning in program order and @backward with each
// recomputed op just before its first user (and again before a far later
// use: options recompute-distance / recompute-min-bytes); report saved
// bytes and recompute FLOPs (every clone counted); erase @joint.
#include "JointGraph.h"

#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-partition"

namespace kiln::passes {
#define GEN_PASS_DEF_KILNPARTITIONPASS
#include "kiln/passes/Passes.h.inc"
} // namespace kiln::passes

namespace kiln::passes {
namespace {

/// The function split: which forward values backward recomputes or loads.
struct Split {
  OpSet forward;                      // ops of @forward
  OpSet backward;                     // ops of @backward (incl. re-materialized)
  OpSet recomputed;                   // forward ops cloned into @backward
  llvm::SetVector<mlir::Value> saved; // program order
};

class Partitioner {
public:
  Partitioner(mlir::func::FuncOp joint, int64_t recomputeDistance, int64_t recomputeMinBytes)
      : joint_(joint), recomputeDistance_(recomputeDistance), recomputeMinBytes_(recomputeMinBytes) {}

  mlir::LogicalResult run();

private:
  bool canRematerialize(mlir::Value value);
  bool shouldRecompute(mlir::Value value);
  void require(mlir::Value value, Split &split, llvm::DenseSet<mlir::Value> &toSave);
  void computeSplit(Split &split);
  mlir::func::FuncOp buildForward(mlir::OpBuilder &builder, const Split &split);
  mlir::func::FuncOp buildBackward(mlir::OpBuilder &builder, const Split &split);
  void annotate(mlir::OpBuilder &builder, mlir::func::FuncOp forward, mlir::func::FuncOp backward, const Split &split);

  mlir::func::FuncOp joint_;
  int64_t recomputeDistance_, recomputeMinBytes_;
  /// Recomputed op -> how many times it was cloned into @backward.
  llvm::DenseMap<mlir::Operation *, int64_t> cloneCounts_;
  JointSlices slices_;
  /// kiln-remat ran: follow its `kiln.saved` marks instead of rule 3.
  bool annotated_ = false;
  llvm::DenseMap<mlir::Value, bool> rematCache_;
};

/// Rule 3 without kiln-remat: a forward value is re-materialized when it is
/// a primal argument, or a layout op / constant whose operands can all be
/// re-materialized.
bool Partitioner::canRematerialize(mlir::Value value) {
  if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(value))
    return !isTangentArgument(joint_, arg.getArgNumber());
  auto found = rematCache_.find(value);
  if (found != rematCache_.end())
    return found->second;
  mlir::Operation *op = value.getDefiningOp();
  bool cheap = mlir::isa<ir::ConstantOp>(op) || ir::isLayoutOp(op);
  bool result = cheap && llvm::all_of(op->getOperands(), [&](mlir::Value v) { return canRematerialize(v); });
  rematCache_[value] = result;
  return result;
}

/// Whether backward recomputes forward value `value` (else it is saved).
/// After kiln-remat: every value is recomputed except forward outputs and
/// results of ops marked `kiln.saved`.
bool Partitioner::shouldRecompute(mlir::Value value) {
  if (!annotated_)
    return canRematerialize(value);
  return !slices_.forwardOutputs.contains(value) && !value.getDefiningOp()->hasAttr("kiln.saved");
}

/// Makes forward value `value` available to @backward: saved, or recomputed
/// there together with what it needs.
void Partitioner::require(mlir::Value value, Split &split, llvm::DenseSet<mlir::Value> &toSave) {
  llvm::SmallVector<mlir::Value> worklist{value};
  while (!worklist.empty()) {
    mlir::Value v = worklist.pop_back_val();
    mlir::Operation *producer = v.getDefiningOp();
    if (!producer || !split.forward.contains(producer) || split.backward.contains(producer) || toSave.contains(v))
      continue; // an argument, computed in backward anyway, or decided
    if (!shouldRecompute(v)) {
      toSave.insert(v);
      continue;
    }
    split.backward.insert(producer);
    split.recomputed.insert(producer);
    for (mlir::Value operand : producer->getOperands())
      worklist.push_back(operand);
  }
}

void Partitioner::computeSplit(Split &split) {
  split.forward = slices_.forward;
  split.backward = slices_.backward;
  llvm::DenseSet<mlir::Value> toSave;
  for (mlir::Value value : slices_.needed)
    require(value, split, toSave);
  // Saved values in program order.
  for (mlir::Operation &op : joint_.getBody().front().without_terminator())
    for (mlir::Value result : op.getResults())
      if (toSave.contains(result))
        split.saved.insert(result);
  LLVM_DEBUG(llvm::dbgs() << "kiln-partition: " << split.forward.size() << " forward ops, " << split.backward.size()
                          << " backward ops (" << split.recomputed.size() << " recomputed), " << split.saved.size()
                          << " saved\n");
}

/// Clones the ops of `body` that are in `ops` (program order) with `mapping`.
static void cloneInOrder(mlir::OpBuilder &builder, mlir::Block &body, const OpSet &ops, mlir::IRMapping &mapping) {
  for (mlir::Operation &op : body.without_terminator())
    if (ops.contains(&op))
      builder.clone(op, mapping);
}

/// Clones recomputed ops into @backward in use order (see
/// cloneWithRecomputedOperands).
struct RecomputeCloner {
  RecomputeCloner(const OpSet &recomputed, mlir::IRMapping &mapping) : recomputed(recomputed), mapping(mapping) {}
  const OpSet &recomputed;
  mlir::IRMapping &mapping;
  /// Recomputed op -> the value of `emitted` when it was last cloned.
  llvm::DenseMap<mlir::Operation *, int64_t> clonedAt;
  llvm::DenseMap<mlir::Operation *, int64_t> counts; ///< recomputed op -> clones
  int64_t emitted = 0; ///< ops cloned into @backward so far
  int64_t farOps = -1; ///< re-clone distance (negative: never)
  int64_t minBytes = 0;

  bool needsClone(mlir::Operation *producer) const {
    auto found = clonedAt.find(producer);
    if (found == clonedAt.end())
      return true;
    // Matmul and conv results are held: recomputing one costs a library
    // launch, the cheap (elementwise, reduction, view) ops cost a pass over memory.
    if (farOps < 0 || emitted - found->second <= farOps || ir::isExternOp(producer))
      return false;
    int64_t bytes = 0;
    for (mlir::Value v : producer->getResults())
      bytes += valueBytes(v);
    return bytes >= minBytes;
  }
};

/// Clones `root` after the recomputed ops it needs that are not cloned yet
/// (depth first, operands in order): each recomputed op lands just before
/// its first user, so recomputed activations are not all live at once (as
/// PyTorch's reordering_to_mimic_autograd_engine). A recomputed value last
/// cloned more than `farOps` ops earlier (of at least `minBytes`, not a
/// matmul) is cloned again for this use instead of being held in between
/// (per-use recomputation, as Chen et al. 2016 "Training Deep Nets with
/// Sublinear Memory Cost" recompute each segment where it is needed): its
/// operands follow the same rule, so the chain is recomputed from nearby,
/// small or matmul values.
static void cloneWithRecomputedOperands(mlir::OpBuilder &builder, mlir::Operation *root, RecomputeCloner &c) {
  llvm::SmallVector<std::pair<mlir::Operation *, unsigned>> stack{{root, 0}};
  llvm::SmallPtrSet<mlir::Operation *, 16> onStack;
  while (!stack.empty()) {
    auto &[op, next] = stack.back();
    if (next < op->getNumOperands()) {
      mlir::Operation *producer = op->getOperand(next++).getDefiningOp();
      if (producer && c.recomputed.contains(producer) && !onStack.contains(producer) && c.needsClone(producer)) {
        onStack.insert(producer);
        stack.push_back({producer, 0});
      }
      continue;
    }
    builder.clone(*op, c.mapping);
    ++c.emitted;
    if (c.recomputed.contains(op)) {
      c.clonedAt[op] = c.emitted;
      ++c.counts[op];
    }
    onStack.erase(op);
    stack.pop_back();
  }
}

mlir::func::FuncOp Partitioner::buildForward(mlir::OpBuilder &builder, const Split &split) {
  mlir::Block &body = joint_.getBody().front();
  auto ret = mlir::cast<mlir::func::ReturnOp>(body.getTerminator());
  llvm::SmallVector<mlir::Type> argTypes, resultTypes;
  llvm::SmallVector<unsigned> primalIndices;
  for (mlir::BlockArgument arg : body.getArguments())
    if (!isTangentArgument(joint_, arg.getArgNumber())) {
      argTypes.push_back(arg.getType());
      primalIndices.push_back(arg.getArgNumber());
    }
  llvm::SmallVector<mlir::Value> results(ret.getOperands().take_front(slices_.numForwardOutputs));
  results.append(split.saved.begin(), split.saved.end());
  for (mlir::Value value : results)
    resultTypes.push_back(value.getType());

  auto func =
      builder.create<mlir::func::FuncOp>(joint_.getLoc(), "forward", builder.getFunctionType(argTypes, resultTypes));
  func->setAttr("kiln.num_forward_outputs", builder.getI64IntegerAttr(slices_.numForwardOutputs));
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
    if (!isTangentArgument(joint_, arg.getArgNumber())) {
      oldArgs.push_back(arg);
      roles.push_back("primal");
    }
  for (mlir::Value value : split.saved) {
    oldArgs.push_back(value);
    roles.push_back("saved");
  }
  for (mlir::BlockArgument arg : body.getArguments())
    if (isTangentArgument(joint_, arg.getArgNumber())) {
      oldArgs.push_back(arg);
      roles.push_back("tangent");
    }
  llvm::SmallVector<mlir::Type> argTypes, resultTypes;
  for (mlir::Value value : oldArgs)
    argTypes.push_back(value.getType());
  auto gradients = ret.getOperands().drop_front(slices_.numForwardOutputs);
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
  RecomputeCloner cloner(split.recomputed, mapping);
  cloner.farOps = recomputeDistance_;
  cloner.minBytes = recomputeMinBytes_;
  for (mlir::Operation &op : body.without_terminator())
    if (split.backward.contains(&op) && !split.recomputed.contains(&op))
      cloneWithRecomputedOperands(builder, &op, cloner);
  for (mlir::Value value : gradients)
    if (mlir::Operation *producer = value.getDefiningOp())
      if (split.recomputed.contains(producer) && !cloner.clonedAt.count(producer))
        cloneWithRecomputedOperands(builder, producer, cloner);
  llvm::SmallVector<mlir::Value> mapped;
  for (mlir::Value value : gradients)
    mapped.push_back(mapping.lookup(value));
  builder.create<mlir::func::ReturnOp>(ret.getLoc(), mapped);
  cloneCounts_ = std::move(cloner.counts);
  return func;
}

/// Reports on the new functions: `kiln.saved_bytes` (bytes of the saved
/// values that are not forward outputs) on both; on @backward
/// `kiln.recomputed` (forward op name -> count cloned into it) and
/// `kiln.recompute_flops` (their FLOPs, JointGraph.h's model), and
/// kiln-remat's `kiln.remat_peak` (estimated peak, target, budget 1's
/// peak; bytes) when it estimated. Removes kiln-remat's marks from the
/// clones.
void Partitioner::annotate(mlir::OpBuilder &builder, mlir::func::FuncOp forward, mlir::func::FuncOp backward,
                           const Split &split) {
  int64_t savedBytes = 0;
  for (mlir::Value value : split.saved)
    if (!slices_.forwardOutputs.contains(value))
      savedBytes += valueBytes(value);
  int64_t flops = 0;
  llvm::MapVector<llvm::StringRef, int64_t> counts;
  for (mlir::Operation &op : joint_.getBody().front().without_terminator())
    if (split.recomputed.contains(&op)) {
      const int64_t clones = std::max<int64_t>(1, cloneCounts_.lookup(&op));
      flops += clones * opFlops(&op);
      counts[op.getName().getStringRef()] += clones;
    }
  llvm::SmallVector<mlir::NamedAttribute> entries;
  for (auto [name, count] : counts)
    entries.push_back(builder.getNamedAttr(name, builder.getI64IntegerAttr(count)));
  forward->setAttr("kiln.saved_bytes", builder.getI64IntegerAttr(savedBytes));
  backward->setAttr("kiln.saved_bytes", builder.getI64IntegerAttr(savedBytes));
  backward->setAttr("kiln.recomputed", builder.getDictionaryAttr(entries));
  backward->setAttr("kiln.recompute_flops", builder.getI64IntegerAttr(flops));
  if (mlir::Attribute peak = joint_->getAttr("kiln.remat_peak"))
    backward->setAttr("kiln.remat_peak", peak);
  for (mlir::func::FuncOp func : {forward, backward})
    func.walk([](mlir::Operation *op) { op->removeAttr("kiln.saved"); });
}

mlir::LogicalResult Partitioner::run() {
  if (mlir::failed(analyzeJoint(joint_, slices_)))
    return mlir::failure();
  annotated_ = joint_->hasAttr("kiln.memory_budget");
  mlir::OpBuilder builder(joint_);
  if (slices_.forwardOnly) {
    // Forward-only graph: nothing to split.
    joint_.setSymName("forward");
    joint_->removeAttr("kiln.memory_budget");
    joint_->setAttr("kiln.num_forward_outputs", builder.getI64IntegerAttr(slices_.numForwardOutputs));
    joint_->setAttr("kiln.num_saved", builder.getI64IntegerAttr(0));
    joint_.walk([](mlir::Operation *op) { op->removeAttr("kiln.saved"); });
    return mlir::success();
  }
  Split split;
  computeSplit(split);
  mlir::func::FuncOp forward = buildForward(builder, split);
  mlir::func::FuncOp backward = buildBackward(builder, split);
  annotate(builder, forward, backward, split);
  joint_.erase();
  return mlir::success();
}

struct KilnPartitionPass : public impl::KilnPartitionPassBase<KilnPartitionPass> {
  using KilnPartitionPassBase::KilnPartitionPassBase;
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto joint = module.lookupSymbol<mlir::func::FuncOp>("joint");
    if (!joint)
      return; // nothing to partition (already split, or a hand-written test)
    if (module.lookupSymbol("forward") || module.lookupSymbol("backward")) {
      joint.emitOpError() << "module already has @forward or @backward";
      return signalPassFailure();
    }
    Partitioner partitioner(joint, recomputeDistance, recomputeMinBytes);
    if (mlir::failed(partitioner.run()))
      signalPassFailure();
  }
};

} // namespace
} // namespace kiln::passes
