// kiln-fuse: group elementwise ops and reductions into kiln.fusion regions.
//
// Recipe, per func.func (program order of the module), rules in
// passes/DESIGN.md:
//   1. every elementwise op and reduction starts as a one-op group;
//   2. vertical fusion: a reverse walk pulls producers into their
//      consumers' group (multi-output when a producer also has users
//      outside the group; reductions join as the producer of an epilogue);
//   3. horizontal fusion: groups that share an input or an edge merge
//      (siblings, and producer/consumer pairs the walk could not join);
//   every merge keeps one iteration space (or a reduction of it), creates no
//   cycle between groups and stays under `max-ops`;
//   4. row fusion: a kiln.reshape / kiln.broadcast whose operand comes from a
//      group joins that group and the groups that use it when the union is
//      one loop over rows (ir::rowSpaceOf: layer_norm, softmax);
//   5. outline each group into a kiln.fusion (a result per value used
//      outside it), wrap constants still used outside fusions, restore a
//      topological order;
// then name every kernel of the module fusion_0, fusion_1, ... in order of
// appearance.
#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#include <functional>
#include <optional>
#include <queue>
#include <vector>

#define DEBUG_TYPE "kiln-fuse"

namespace kiln::passes {
#define GEN_PASS_DEF_KILNFUSEPASS
#include "kiln/passes/Passes.h.inc"
} // namespace kiln::passes

namespace kiln::passes {
namespace {

/// Ops that can be grouped: elementwise ops, reductions and the indexing
/// ops (not constants, which are cloned into the fusions that use them).
static bool isComputeOp(mlir::Operation *op) {
  return ir::isElementwiseOp(op) || ir::isReductionOp(op) || ir::isIndexingOp(op);
}

static llvm::ArrayRef<int64_t> shapeOf(mlir::Value value) {
  return mlir::cast<mlir::RankedTensorType>(value.getType()).getShape();
}

static llvm::SmallVector<int64_t> reducedDims(mlir::Operation *reduction) {
  return llvm::to_vector(ir::reductionDims(reduction));
}

/// The loop nest of a group. `shape` is the iteration space: an elementwise
/// op's result shape, or a reduction's operand shape. Once the group holds a
/// reduction, `dims` are its reduced dims and `reduced` its result shape,
/// the shape of the group's epilogue ops.
struct Space {
  llvm::SmallVector<int64_t> shape;
  bool hasReduction = false;
  llvm::SmallVector<int64_t> dims;
  llvm::SmallVector<int64_t> reduced;
  /// A kiln.cumsum: a kernel of its own (its sequential loop along the dim
  /// shares no loop nest), so it never combines.
  bool alone = false;
};

static Space spaceOf(mlir::Operation *op) {
  Space space;
  space.alone = mlir::isa<ir::CumsumOp>(op);
  if (ir::isReductionOp(op)) {
    space.shape = llvm::to_vector(shapeOf(op->getOperand(0)));
    space.hasReduction = true;
    space.dims = reducedDims(op);
    space.reduced = llvm::to_vector(shapeOf(op->getResult(0)));
  } else {
    space.shape = llvm::to_vector(shapeOf(op->getResult(0)));
  }
  return space;
}

/// The space of the union of two groups, if they may share one loop nest:
/// the same iteration space; or one group reduces and the other runs over
/// its iteration space (prologue, sibling) or, with `epilogues`, over its
/// reduced shape (epilogue). Two reductions must reduce the same dims of
/// the same space.
static std::optional<Space> combineSpaces(const Space &a, const Space &b, bool epilogues) {
  if (a.alone || b.alone)
    return std::nullopt;
  if (!a.hasReduction && !b.hasReduction) {
    if (a.shape == b.shape)
      return a;
    return std::nullopt;
  }
  if (a.hasReduction && b.hasReduction) {
    if (a.shape == b.shape && a.dims == b.dims)
      return a;
    return std::nullopt;
  }
  const Space &reduction = a.hasReduction ? a : b;
  const Space &pointwise = a.hasReduction ? b : a;
  if (pointwise.shape == reduction.shape || (epilogues && pointwise.shape == reduction.reduced))
    return reduction;
  return std::nullopt;
}

struct FuseOptions {
  unsigned maxOps = 64;
  bool multiOutput = true;
  bool siblings = true;
  bool epilogues = true;
  bool rows = true;
};

/// The ops of one block as a graph whose nodes are groups (union-find over
/// op indices in program order). Ops that are not compute ops stay
/// one-op nodes and never merge. Every merge is of two nodes with no path
/// of two or more edges between them, so the contracted graph stays a DAG:
/// the fusions can always be put in a topological order.
class FusionGraph {
public:
  FusionGraph(mlir::Block &block, const FuseOptions &options) : options(options) {
    for (mlir::Operation &op : block.without_terminator()) {
      index[&op] = static_cast<int>(ops.size());
      ops.push_back(&op);
    }
    const int n = static_cast<int>(ops.size());
    leader.resize(n);
    members.resize(n);
    spaces.resize(n);
    for (int i = 0; i < n; ++i) {
      leader[i] = i;
      members[i].push_back(i);
      if (isComputeOp(ops[i]))
        spaces[i] = spaceOf(ops[i]);
    }
  }

  void fuseProducers();
  void fuseGroups();
  void fuseRows();

  /// The groups with at least one compute op, each in program order,
  /// ordered by their first op.
  std::vector<llvm::SmallVector<mlir::Operation *>> groups() {
    std::vector<llvm::SmallVector<mlir::Operation *>> result;
    for (int node : liveGroups()) {
      llvm::SmallVector<mlir::Operation *> group;
      for (int i : members[node])
        group.push_back(ops[i]);
      result.push_back(std::move(group));
    }
    return result;
  }

private:
  int find(int i) {
    while (leader[i] != i) {
      leader[i] = leader[leader[i]];
      i = leader[i];
    }
    return i;
  }
  /// The node of a user op, or -1 for the terminator and ops elsewhere.
  int nodeOf(mlir::Operation *op) {
    auto it = index.find(op);
    return it == index.end() ? -1 : find(it->second);
  }
  bool isGroup(int node) { return isComputeOp(ops[node]); }

  /// Nodes that use a value of `node` (may contain duplicates).
  llvm::SmallVector<int> successors(int node) {
    llvm::SmallVector<int> result;
    for (int i : members[node])
      for (mlir::Operation *user : ops[i]->getUsers()) {
        int succ = nodeOf(user);
        if (succ >= 0 && succ != node)
          result.push_back(succ);
      }
    return result;
  }

  /// True if merging the `nodes` would create a cycle: a path that leaves
  /// the set and comes back (two or more edges through other nodes).
  bool wouldCreateCycle(llvm::ArrayRef<int> nodes) {
    llvm::DenseSet<int> set(nodes.begin(), nodes.end());
    llvm::SmallVector<int> worklist;
    llvm::DenseSet<int> seen;
    for (int start : nodes)
      for (int succ : successors(start))
        if (!set.contains(succ) && seen.insert(succ).second)
          worklist.push_back(succ);
    while (!worklist.empty()) {
      int node = worklist.pop_back_val();
      for (int succ : successors(node)) {
        if (set.contains(succ))
          return true;
        if (seen.insert(succ).second)
          worklist.push_back(succ);
      }
    }
    return false;
  }
  bool wouldCreateCycle(int a, int b) { return wouldCreateCycle(llvm::ArrayRef<int>{a, b}); }

  /// Compute ops (what `max-ops` counts) among the members of `node`.
  unsigned computeOps(int node) {
    return static_cast<unsigned>(llvm::count_if(members[node], [&](int i) { return isComputeOp(ops[i]); }));
  }

  /// Merges the `nodes` into `nodes[0]` if their union is a row fusion
  /// (ir::rowSpaceOf), stays within `max-ops` and creates no cycle.
  bool tryMergeRows(llvm::ArrayRef<int> nodes) {
    unsigned count = 0;
    llvm::SmallVector<int> all;
    for (int node : nodes) {
      if (llvm::any_of(members[node], [&](int i) { return ir::isIndexingOp(ops[i]); }))
        return false; // a row kernel's loop nest has no indexing ops
      count += computeOps(node);
      all.append(members[node].begin(), members[node].end());
    }
    if (count > options.maxOps)
      return false;
    llvm::sort(all);
    llvm::SmallVector<mlir::Operation *> memberOps;
    for (int i : all)
      memberOps.push_back(ops[i]);
    std::string why;
    if (mlir::failed(ir::rowSpaceOf(memberOps, &why))) {
      LLVM_DEBUG(llvm::dbgs() << "kiln-fuse: no row fusion at " << *ops[nodes[1]] << ": " << why << "\n");
      return false;
    }
    if (wouldCreateCycle(nodes))
      return false;
    const int a = nodes[0];
    for (int node : nodes.drop_front()) {
      leader[node] = a;
      members[node].clear();
    }
    members[a] = std::move(all);
    LLVM_DEBUG(llvm::dbgs() << "kiln-fuse: row fusion through " << *ops[nodes[1]] << "\n");
    return true;
  }

  /// True if a kiln.scatter_add is among the members of `node`.
  bool hasScatter(int node) {
    return llvm::any_of(members[node], [&](int i) { return mlir::isa<ir::ScatterAddOp>(ops[i]); });
  }

  /// True if a kiln.gather of `node` reads its input (the table it reads at
  /// data-dependent positions) from a member of `other`.
  bool gathersFrom(int node, int other) {
    return llvm::any_of(members[node], [&](int i) {
      auto gather = mlir::dyn_cast<ir::GatherOp>(ops[i]);
      mlir::Operation *producer = gather ? gather.getInput().getDefiningOp() : nullptr;
      return producer && nodeOf(producer) == other;
    });
  }

  /// Indexing rules: a scatter_add is a kernel of its own (a sequential
  /// loop nest), and the producer of a gather's table never joins the
  /// gather (the table is read at any position, not in the loop nest).
  bool indexingAllows(int a, int b) { return !hasScatter(a) && !hasScatter(b) && !gathersFrom(a, b) && !gathersFrom(b, a); }

  /// Merges group `b` into group `a` if the rules allow it.
  bool tryMerge(int a, int b) {
    if (a == b || !isGroup(a) || !isGroup(b) || !indexingAllows(a, b))
      return false;
    if (members[a].size() + members[b].size() > options.maxOps)
      return false;
    std::optional<Space> space = combineSpaces(spaces[a], spaces[b], options.epilogues);
    if (!space || wouldCreateCycle(a, b))
      return false;
    leader[b] = a;
    members[a].append(members[b].begin(), members[b].end());
    llvm::sort(members[a]);
    members[b].clear();
    spaces[a] = *space;
    LLVM_DEBUG(llvm::dbgs() << "kiln-fuse: merged " << *ops[b] << " into the group of " << *ops[a] << "\n");
    return true;
  }

  /// Live groups ordered by their first op.
  llvm::SmallVector<int> liveGroups() {
    llvm::SmallVector<int> result;
    for (int i = 0, n = static_cast<int>(ops.size()); i < n; ++i)
      if (find(i) == i && isGroup(i))
        result.push_back(i);
    llvm::sort(result, [&](int x, int y) { return members[x].front() < members[y].front(); });
    return result;
  }

  /// Values a group reads from outside (constants excluded: they are cloned).
  llvm::SmallVector<mlir::Value> inputsOf(int node) {
    llvm::SetVector<mlir::Value> inputs;
    for (int i : members[node])
      for (mlir::Value operand : ops[i]->getOperands()) {
        mlir::Operation *producer = operand.getDefiningOp();
        if (producer && (mlir::isa<ir::ConstantOp>(producer) || nodeOf(producer) == node))
          continue;
        inputs.insert(operand);
      }
    return inputs.takeVector();
  }

  /// True if the groups read a common input or one uses a value of the other.
  bool related(int a, int b) {
    llvm::SmallVector<mlir::Value> inputsA = inputsOf(a);
    llvm::DenseSet<mlir::Value> setA(inputsA.begin(), inputsA.end());
    for (mlir::Value v : inputsOf(b)) {
      if (setA.contains(v))
        return true;
      mlir::Operation *producer = v.getDefiningOp();
      if (producer && nodeOf(producer) == a)
        return true;
    }
    for (mlir::Value v : inputsA) {
      mlir::Operation *producer = v.getDefiningOp();
      if (producer && nodeOf(producer) == b)
        return true;
    }
    return false;
  }

  FuseOptions options;
  llvm::SmallVector<mlir::Operation *> ops;
  llvm::DenseMap<mlir::Operation *, int> index;
  llvm::SmallVector<int> leader;
  llvm::SmallVector<llvm::SmallVector<int>> members;
  llvm::SmallVector<Space> spaces;
};

/// Vertical fusion. Walks the ops in reverse program order; each compute op
/// not yet taken seeds a group, and every earlier compute op with a user in
/// the group is offered to it (tryMerge checks space, cap, cycles). Without
/// multi-output all of a producer's users must be in the group; without
/// epilogues a reduction never joins as a producer.
void FusionGraph::fuseProducers() {
  const int n = static_cast<int>(ops.size());
  llvm::SmallVector<bool> taken(n, false);
  for (int seed = n - 1; seed >= 0; --seed) {
    if (!isComputeOp(ops[seed]) || taken[seed])
      continue;
    taken[seed] = true;
    for (int i = seed - 1; i >= 0; --i) {
      mlir::Operation *producer = ops[i];
      if (taken[i] || !isComputeOp(producer))
        continue;
      if (!options.epilogues && ir::isReductionOp(producer))
        continue;
      int group = find(seed);
      auto inGroup = [&](mlir::Operation *user) { return nodeOf(user) == group; };
      bool anyUser = llvm::any_of(producer->getUsers(), inGroup);
      bool allUsers = llvm::all_of(producer->getUsers(), inGroup);
      if (!anyUser || (!options.multiOutput && !allUsers))
        continue;
      if (tryMerge(group, i))
        taken[i] = true;
    }
  }
}

/// Horizontal fusion: in program order, each group absorbs every later
/// group it shares an input or an edge with (tryMerge checks space, cap,
/// cycles), until nothing changes. Without `siblings` nothing happens here.
void FusionGraph::fuseGroups() {
  if (!options.siblings)
    return;
  for (bool changed = true; changed;) {
    changed = false;
    llvm::SmallVector<int> live = liveGroups();
    for (size_t x = 0; x < live.size(); ++x) {
      int a = live[x];
      if (find(a) != a)
        continue;
      for (size_t y = x + 1; y < live.size(); ++y) {
        int b = live[y];
        if (find(b) != b || !related(a, b))
          continue;
        if (tryMerge(a, b))
          changed = true;
      }
    }
  }
}

/// Row fusion (option `rows`). In program order, each kiln.reshape or
/// kiln.broadcast not yet fused whose operand comes from a group is offered,
/// with the layout ops that follow it as their only user (a chain), together
/// with that group and the groups that use the chain's last op (all of them,
/// else one at a time); a broadcast must have all its users in one group, or it
/// would be materialized as a fusion result. Repeated until nothing
/// changes. The layer_norm chain reduce -> reshape -> scale -> broadcast ->
/// sub/square/reduce -> reshape -> sqrt -> broadcast -> normalize becomes
/// one group.
void FusionGraph::fuseRows() {
  if (!options.rows)
    return;
  const int n = static_cast<int>(ops.size());
  for (bool changed = true; changed;) {
    changed = false;
    for (int l = 0; l < n; ++l) {
      mlir::Operation *layout = ops[l];
      if (!mlir::isa<ir::ReshapeOp, ir::BroadcastOp>(layout) || find(l) != l)
        continue;
      mlir::Operation *producer = layout->getOperand(0).getDefiningOp();
      const int p = producer ? nodeOf(producer) : -1;
      if (p < 0 || !isGroup(p))
        continue;
      // A chain of layout ops (softmax: reshape [R] -> [R, 1], then
      // broadcast [R, 1] -> [R, C]) joins as a whole: each but the last
      // has the next as its only user.
      llvm::SmallVector<int> chain = {l};
      while (layout->hasOneUse()) {
        mlir::Operation *next = *layout->getUsers().begin();
        const int k = nodeOf(next);
        if (k < 0 || !mlir::isa<ir::ReshapeOp, ir::BroadcastOp>(next) || find(k) != k)
          break;
        chain.push_back(k);
        layout = next;
      }
      llvm::SmallVector<int> users;
      bool outside = false;
      for (mlir::Operation *user : layout->getUsers()) {
        const int u = nodeOf(user);
        if (u < 0 || !isGroup(u))
          outside = true;
        else if (u != p && !llvm::is_contained(users, u))
          users.push_back(u);
      }
      if (users.empty() || (mlir::isa<ir::BroadcastOp>(layout) && (outside || users.size() > 1)))
        continue;
      llvm::sort(users, [&](int x, int y) { return members[x].front() < members[y].front(); });
      llvm::SmallVector<int> nodes = {p};
      nodes.append(chain);
      nodes.append(users);
      bool merged = tryMergeRows(nodes);
      for (size_t k = 0; !merged && users.size() > 1 && k < users.size(); ++k) {
        nodes.resize(1 + chain.size());
        nodes.push_back(users[k]);
        merged = tryMergeRows(nodes);
      }
      changed |= merged;
    }
  }
}

/// Replaces `members` (program order) by one kiln.fusion at the last
/// member's position. Constants used by members are cloned into the body;
/// other external values become operands (in order of first use); every
/// member value used outside the group becomes a result (program order).
static void outlineGroup(llvm::ArrayRef<mlir::Operation *> members) {
  llvm::DenseSet<mlir::Operation *> memberSet(members.begin(), members.end());
  llvm::SetVector<mlir::Value> inputs;
  llvm::SetVector<mlir::Operation *> constants;
  llvm::SmallVector<mlir::Value> results;
  for (mlir::Operation *op : members) {
    for (mlir::Value operand : op->getOperands()) {
      mlir::Operation *producer = operand.getDefiningOp();
      if (producer && memberSet.contains(producer))
        continue;
      if (producer && mlir::isa<ir::ConstantOp>(producer))
        constants.insert(producer);
      else
        inputs.insert(operand);
    }
    for (mlir::Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](mlir::Operation *user) { return !memberSet.contains(user); }))
        results.push_back(result);
  }
  mlir::Operation *last = members.back();
  if (results.empty()) // a dead group: keep its last value, as before
    results.append(last->result_begin(), last->result_end());

  mlir::OpBuilder builder(last);
  llvm::SmallVector<mlir::Type> resultTypes;
  for (mlir::Value result : results)
    resultTypes.push_back(result.getType());
  auto fusion =
      builder.create<ir::FusionOp>(last->getLoc(), resultTypes, builder.getStringAttr("fusion"), inputs.getArrayRef());
  mlir::Block *body = builder.createBlock(&fusion.getBody());
  mlir::IRMapping mapping;
  for (mlir::Value input : inputs)
    mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
  builder.setInsertionPointToEnd(body);
  for (mlir::Operation *constant : constants)
    builder.clone(*constant, mapping);
  for (mlir::Operation *op : members)
    builder.clone(*op, mapping);
  llvm::SmallVector<mlir::Value> yielded;
  for (mlir::Value result : results)
    yielded.push_back(mapping.lookup(result));
  builder.create<ir::YieldOp>(last->getLoc(), yielded);

  for (auto [result, replacement] : llvm::zip(results, fusion.getResults()))
    result.replaceAllUsesWith(replacement);
  for (mlir::Operation *op : llvm::reverse(members))
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

/// Sorts `block` topologically, keeping every op as close to its old
/// position as possible: Kahn's algorithm that always takes, among the ready
/// ops, the one that came first. An op that used an earlier member of a
/// multi-output fusion lands right after the fusion. (mlir::sortTopologically
/// instead leaves a not-yet-ready op behind every op that is ready in the
/// same sweep, which can push it, and the buffers it keeps alive, far down
/// the block.) Returns false on a cycle.
static bool sortNearOriginalOrder(mlir::Block &block) {
  std::vector<mlir::Operation *> ops;
  llvm::DenseMap<mlir::Operation *, unsigned> index;
  for (mlir::Operation &op : block) {
    index[&op] = static_cast<unsigned>(ops.size());
    ops.push_back(&op);
  }
  std::vector<unsigned> pending(ops.size(), 0);
  std::vector<llvm::SmallVector<unsigned>> users(ops.size());
  for (unsigned i = 0; i < ops.size(); ++i) {
    llvm::SetVector<unsigned> producers;
    ops[i]->walk([&](mlir::Operation *nested) {
      for (mlir::Value operand : nested->getOperands())
        if (mlir::Operation *def = operand.getDefiningOp(); def && def->getBlock() == &block && def != ops[i])
          producers.insert(index.lookup(def));
    });
    pending[i] = static_cast<unsigned>(producers.size());
    for (unsigned p : producers)
      users[p].push_back(i);
  }
  std::priority_queue<unsigned, std::vector<unsigned>, std::greater<unsigned>> ready;
  for (unsigned i = 0; i < ops.size(); ++i)
    if (pending[i] == 0)
      ready.push(i);
  std::vector<unsigned> order;
  while (!ready.empty()) {
    unsigned i = ready.top();
    ready.pop();
    order.push_back(i);
    for (unsigned u : users[i])
      if (--pending[u] == 0)
        ready.push(u);
  }
  if (order.size() != ops.size())
    return false;
  for (unsigned i : order)
    ops[i]->moveBefore(&block, block.end());
  return true;
}

static mlir::LogicalResult fuseFunction(mlir::func::FuncOp func, const FuseOptions &options) {
  for (mlir::Block &block : func.getBody()) {
    FusionGraph graph(block, options);
    graph.fuseProducers();
    graph.fuseGroups();
    graph.fuseRows();
    std::vector<llvm::SmallVector<mlir::Operation *>> groups = graph.groups();
    LLVM_DEBUG(llvm::dbgs() << "kiln-fuse: @" << func.getSymName() << ": " << groups.size() << " groups\n");
    // A multi-output fusion sits at its last member; a user of an earlier
    // member that came before it moves below it in the sort.
    for (const auto &group : groups)
      outlineGroup(group);
    wrapLeftoverConstants(block);
    if (!sortNearOriginalOrder(block))
      return func.emitError("kiln-fuse: fusion groups form a cycle (internal error)");
  }
  return mlir::success();
}

/// Names the kernels fusion_0, fusion_1, ... in module order.
static void nameKernels(mlir::ModuleOp module) {
  int next = 0;
  module.walk([&](ir::FusionOp fusion) { fusion.setKernel("fusion_" + std::to_string(next++)); });
}

struct KilnFusePass : public impl::KilnFusePassBase<KilnFusePass> {
  using KilnFusePassBase::KilnFusePassBase;

  void runOnOperation() override {
    FuseOptions options;
    options.maxOps = std::max(1u, static_cast<unsigned>(maxOps));
    options.multiOutput = multiOutput;
    options.siblings = siblings;
    options.epilogues = epilogues;
    options.rows = rows;
    mlir::ModuleOp module = getOperation();
    for (auto func : module.getOps<mlir::func::FuncOp>())
      if (!func.isExternal() && mlir::failed(fuseFunction(func, options)))
        return signalPassFailure();
    nameKernels(module);
  }
};

} // namespace
} // namespace kiln::passes
