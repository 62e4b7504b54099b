// kiln-remat: choose which forward values of func @joint backward loads
// (saved) and which it recomputes, under a memory budget.
//
// Recipe (rules and sources in passes/README.md):
//   1. slice @joint (JointGraph.h); the "cone" is the forward ops that the
//      values backward reads depend on;
//   2. build the min-cut network of AOTAutograd's
//      min_cut_rematerialization_partition over the cone and solve it with
//      Dinic's max-flow for a given set of banned (never recomputed) ops;
//   3. budget 1: ban every op that is not cheap (or that backward would
//      write out anyway); budget 0: ban nothing; in between: a 0/1 knapsack
//      over those expensive ops (keep banned the ones whose recomputation
//      costs the most FLOPs, within the byte budget), repeated while the cut
//      overshoots, then a greedy fix-up that bans back any op that still
//      fits;
//   4. mark the producers of the saved values `kiln.saved` and @joint
//      `kiln.memory_budget`; kiln-partition builds @forward/@backward.
#include "JointGraph.h"

#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Debug.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <queue>
#include <vector>

#define DEBUG_TYPE "kiln-remat"

namespace kiln::passes {
#define GEN_PASS_DEF_KILNREMATPASS
#include "kiln/passes/Passes.h.inc"
} // namespace kiln::passes

namespace kiln::passes {
namespace {

constexpr int64_t kInfinity = std::numeric_limits<int64_t>::max() / 4;

/// The knapsack prices recomputation in matmul-FLOP equivalents: a FLOP of
/// an elementwise op or reduction counts this many times a matmul FLOP.
/// On the 2-core development VM oneDNN's GEMMs run at ~100 GFLOP/s and the
/// generated elementwise kernels at a few GFLOP/s (less with exp/tanh);
/// with plain FLOPs the knapsack recomputes GELU and softmax chains, which
/// look many times cheaper than the matmuls next to them and take longer.
/// 32 was the fastest of {1, 32, 128} for the GPT step at budget 0.5
/// (bench/README.md).
constexpr int64_t kPointwiseFlopWeight = 32;

static int64_t weightedFlops(mlir::Operation *op) {
  return mlir::isa<ir::MatmulOp>(op) ? opFlops(op) : opFlops(op) * kPointwiseFlopWeight;
}

/// Dinic's max-flow (Dinic 1970) on a small directed graph with int64
/// capacities, and the sink side of the resulting minimum cut.
class MaxFlow {
public:
  int addNode() {
    adjacency_.emplace_back();
    return static_cast<int>(adjacency_.size()) - 1;
  }
  void addEdge(int from, int to, int64_t capacity) {
    adjacency_[from].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({to, capacity});
    adjacency_[to].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({from, 0});
  }

  int64_t run(int source, int sink) {
    int64_t flow = 0;
    while (buildLevels(source, sink)) {
      next_.assign(adjacency_.size(), 0);
      while (int64_t pushed = push(source, sink, kInfinity))
        flow += pushed;
    }
    return flow;
  }

  /// After run(): the nodes that can still reach `sink` in the residual
  /// graph. Its complement is the source side of the minimum cut closest to
  /// the sink (the cut that recomputes the least among equal-byte cuts).
  std::vector<bool> sinkSide(int sink) const {
    std::vector<std::vector<int>> reverse(adjacency_.size());
    for (size_t from = 0; from < adjacency_.size(); ++from)
      for (int e : adjacency_[from])
        if (edges_[e].capacity > 0)
          reverse[edges_[e].to].push_back(static_cast<int>(from));
    std::vector<bool> seen(adjacency_.size(), false);
    std::vector<int> stack{sink};
    seen[sink] = true;
    while (!stack.empty()) {
      int node = stack.back();
      stack.pop_back();
      for (int from : reverse[node])
        if (!seen[from]) {
          seen[from] = true;
          stack.push_back(from);
        }
    }
    return seen;
  }

private:
  struct Edge {
    int to;
    int64_t capacity; // residual
  };

  bool buildLevels(int source, int sink) {
    level_.assign(adjacency_.size(), -1);
    std::queue<int> queue;
    level_[source] = 0;
    queue.push(source);
    while (!queue.empty()) {
      int node = queue.front();
      queue.pop();
      for (int e : adjacency_[node])
        if (edges_[e].capacity > 0 && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[node] + 1;
          queue.push(edges_[e].to);
        }
    }
    return level_[sink] >= 0;
  }

  int64_t push(int node, int sink, int64_t limit) {
    if (node == sink)
      return limit;
    for (size_t &i = next_[node]; i < adjacency_[node].size(); ++i) {
      int e = adjacency_[node][i];
      Edge &edge = edges_[e];
      if (edge.capacity <= 0 || level_[edge.to] != level_[node] + 1)
        continue;
      if (int64_t pushed = push(edge.to, sink, std::min(limit, edge.capacity))) {
        edge.capacity -= pushed;
        edges_[e ^ 1].capacity += pushed;
        return pushed;
      }
    }
    return 0;
  }

  std::vector<Edge> edges_;
  std::vector<std::vector<int>> adjacency_;
  std::vector<int> level_;
  std::vector<size_t> next_;
};

/// A save/recompute decision: the saved values (program order) and their
/// bytes (forward outputs excluded: @forward returns them anyway).
struct Cut {
  llvm::SetVector<mlir::Value> saved;
  int64_t bytes = 0;
};

class Rematerializer {
public:
  Rematerializer(mlir::func::FuncOp joint, const JointSlices &slices) : joint_(joint), slices_(slices) {
    collectCone();
  }

  /// The decision for `budget` in [0, 1].
  Cut decide(double budget);

private:
  void collectCone();
  bool materializedInBackward(mlir::Operation *op) const;
  int64_t recomputeCost(mlir::Operation *item) const;
  Cut solve(const OpSet &banned) const;
  OpSet knapsack(int64_t capacity) const;

  mlir::func::FuncOp joint_;
  const JointSlices &slices_;
  std::vector<mlir::Operation *> cone_;  // program order
  OpSet permanent_;                      // never recomputed
  OpSet expensive_;                      // recomputed only under a budget < 1 (the knapsack items)
  std::vector<mlir::Operation *> items_; // expensive_, program order
  OpSet coneSet_;
  llvm::DenseMap<mlir::Operation *, int64_t> itemCost_; // recomputeCost of each item
};

/// PyTorch's is_materialized_backwards (ban_recompute_materialized_backward):
/// a backward op reads a result of `op` without fusing with it (a matmul,
/// or a layout op, which kiln-fuse never fuses across), so recomputing it
/// would write the whole tensor in backward anyway. Views never count.
bool Rematerializer::materializedInBackward(mlir::Operation *op) const {
  if (ir::isLayoutOp(op) || mlir::isa<ir::ConstantOp>(op))
    return false;
  // Users, and users of views of it (forward or backward).
  llvm::SmallVector<mlir::Operation *> worklist{op};
  OpSet seen;
  while (!worklist.empty()) {
    mlir::Operation *current = worklist.pop_back_val();
    for (mlir::Operation *user : current->getUsers()) {
      if (slices_.backward.contains(user) && !ir::isFusibleOp(user))
        return true;
      if (ir::isLayoutOp(user) && seen.insert(user).second)
        worklist.push_back(user);
    }
  }
  return false;
}

/// The cone: forward ops that the needed values depend on.
void Rematerializer::collectCone() {
  OpSet cone;
  llvm::SmallVector<mlir::Value> worklist(slices_.needed.begin(), slices_.needed.end());
  while (!worklist.empty()) {
    mlir::Operation *op = worklist.pop_back_val().getDefiningOp();
    if (!op || !slices_.forward.contains(op) || !cone.insert(op).second)
      continue;
    for (mlir::Value operand : op->getOperands())
      worklist.push_back(operand);
  }
  for (mlir::Operation &op : joint_.getBody().front().without_terminator()) {
    if (!cone.contains(&op))
      continue;
    cone_.push_back(&op);
    if (!isRecomputable(&op)) {
      permanent_.insert(&op);
    } else if (!isCheapToRecompute(&op) || materializedInBackward(&op)) {
      expensive_.insert(&op);
      items_.push_back(&op);
    }
  }
  coneSet_ = std::move(cone);
  for (mlir::Operation *item : items_)
    itemCost_[item] = recomputeCost(item);
}

/// What recomputing expensive op `item` would cost, in matmul-FLOP
/// equivalents: its own FLOPs and those of the cheap ops it needs that
/// nothing else provides (its cone ancestors up to other expensive ops,
/// never-recomputed ops, primals and forward outputs).
int64_t Rematerializer::recomputeCost(mlir::Operation *item) const {
  int64_t cost = weightedFlops(item);
  OpSet seen{item};
  llvm::SmallVector<mlir::Value> worklist(item->getOperands());
  while (!worklist.empty()) {
    mlir::Value value = worklist.pop_back_val();
    mlir::Operation *op = value.getDefiningOp();
    if (!op || !coneSet_.contains(op) || slices_.forwardOutputs.contains(value) || expensive_.contains(op) ||
        permanent_.contains(op) || !seen.insert(op).second)
      continue;
    cost += weightedFlops(op);
    worklist.append(op->operand_begin(), op->operand_end());
  }
  return cost;
}

/// The min-cut network of min_cut_rematerialization_partition:
///   source -> in(op)            infinite, if `op` is banned
///   in(op) -> out(v)            bytes(v): saving v costs its bytes
///   out(u) -> in(op)            infinite, for each operand u of op
///   out(v) -> sink              infinite, for each value backward reads
/// Primal arguments and forward outputs have an out node and no in edge:
/// backward gets them for free. The saved values are the cut in -> out
/// edges.
Cut Rematerializer::solve(const OpSet &banned) const {
  MaxFlow flow;
  const int source = flow.addNode(), sink = flow.addNode();
  llvm::DenseMap<mlir::Operation *, int> in;
  llvm::DenseMap<mlir::Value, int> out;
  auto outNode = [&](mlir::Value value) {
    auto [it, inserted] = out.try_emplace(value, 0);
    if (inserted)
      it->second = flow.addNode();
    return it->second;
  };
  for (mlir::Operation *op : cone_) {
    int inNode = flow.addNode();
    in[op] = inNode;
    if (banned.contains(op))
      flow.addEdge(source, inNode, kInfinity);
    for (mlir::Value operand : op->getOperands())
      flow.addEdge(outNode(operand), inNode, kInfinity);
    for (mlir::Value result : op->getResults())
      if (!slices_.forwardOutputs.contains(result))
        flow.addEdge(inNode, outNode(result), valueBytes(result));
  }
  for (mlir::Value value : slices_.needed)
    flow.addEdge(outNode(value), sink, kInfinity);
  flow.run(source, sink);
  std::vector<bool> sinkSide = flow.sinkSide(sink);

  Cut cut;
  for (mlir::Operation *op : cone_)
    for (mlir::Value result : op->getResults()) {
      auto found = out.find(result);
      if (found == out.end() || slices_.forwardOutputs.contains(result))
        continue;
      if (!sinkSide[in.lookup(op)] && sinkSide[found->second]) {
        cut.saved.insert(result);
        cut.bytes += valueBytes(result);
      }
    }
  return cut;
}

/// 0/1 knapsack by dynamic programming (as dp_knapsack in PyTorch's
/// torch/_functorch/_activation_checkpointing/knapsack.py): among the
/// expensive ops, the set to keep banned (saved, not recomputed) whose
/// recomputation would cost the most (recomputeCost) and whose result bytes
/// fit in `capacity`. Weights are rounded up
/// to 1/1000 of the capacity, so the chosen set always fits.
OpSet Rematerializer::knapsack(int64_t capacity) const {
  OpSet kept;
  if (capacity < 0)
    return kept;
  constexpr int64_t kBuckets = 1000;
  const double bucket = std::max(1.0, static_cast<double>(capacity) / kBuckets);
  const int64_t slots = static_cast<int64_t>(std::floor(static_cast<double>(capacity) / bucket));
  const size_t n = items_.size();
  std::vector<int64_t> weight(n), value(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t bytes = 0;
    for (mlir::Value result : items_[i]->getResults())
      bytes += valueBytes(result);
    weight[i] = static_cast<int64_t>(std::ceil(static_cast<double>(bytes) / bucket));
    value[i] = itemCost_.lookup(items_[i]);
  }
  // best[j]: most cost within j buckets; take[i][j]: item i taken there.
  std::vector<int64_t> best(slots + 1, 0);
  std::vector<std::vector<bool>> take(n, std::vector<bool>(slots + 1, false));
  for (size_t i = 0; i < n; ++i)
    for (int64_t j = slots; j >= weight[i]; --j)
      if (best[j - weight[i]] + value[i] > best[j]) {
        best[j] = best[j - weight[i]] + value[i];
        take[i][j] = true;
      }
  int64_t j = slots;
  for (size_t i = n; i-- > 0;)
    if (take[i][j]) {
      kept.insert(items_[i]);
      j -= weight[i];
    }
  return kept;
}

Cut Rematerializer::decide(double budget) {
  OpSet defaultBanned = permanent_;
  defaultBanned.insert(expensive_.begin(), expensive_.end());
  if (budget >= 1.0)
    return solve(defaultBanned);
  Cut minCut = solve(permanent_);
  if (budget <= 0.0)
    return minCut;
  Cut maxCut = solve(defaultBanned);
  const int64_t target =
      minCut.bytes + static_cast<int64_t>(std::floor(budget * static_cast<double>(maxCut.bytes - minCut.bytes)));
  LLVM_DEBUG(llvm::dbgs() << "kiln-remat: budget " << budget << ": min " << minCut.bytes << " B, max " << maxCut.bytes
                          << " B, target " << target << " B, " << items_.size() << " expensive ops\n");
  if (maxCut.bytes <= target)
    return maxCut;

  // Knapsack over the expensive ops; while the cut overshoots the target,
  // shrink the capacity by the overshoot (and below the kept set's weight,
  // so the kept set changes). Capacity < 0 means recompute them all.
  auto banning = [&](const OpSet &kept) {
    OpSet banned = permanent_;
    banned.insert(kept.begin(), kept.end());
    return banned;
  };
  auto keptBytes = [](const OpSet &kept) {
    int64_t bytes = 0;
    for (mlir::Operation *op : kept)
      for (mlir::Value result : op->getResults())
        bytes += valueBytes(result);
    return bytes;
  };
  OpSet kept;
  Cut cut = minCut;
  int64_t capacity = target - minCut.bytes;
  for (int attempt = 0; attempt < 64 && capacity >= 0; ++attempt) {
    OpSet candidate = knapsack(capacity);
    Cut trial = solve(banning(candidate));
    LLVM_DEBUG(llvm::dbgs() << "kiln-remat: knapsack capacity " << capacity << " B keeps " << candidate.size()
                            << " ops; cut " << trial.bytes << " B\n");
    if (trial.bytes <= target) {
      kept = std::move(candidate);
      cut = std::move(trial);
      break;
    }
    capacity = std::min(capacity - (trial.bytes - target), keptBytes(candidate) - 1);
  }

  // Fix-up: ban back each remaining expensive op, costliest first, when the
  // cut still fits the target.
  std::vector<mlir::Operation *> order = items_;
  std::stable_sort(order.begin(), order.end(),
                   [&](mlir::Operation *a, mlir::Operation *b) { return itemCost_.lookup(a) > itemCost_.lookup(b); });
  for (mlir::Operation *op : order) {
    if (kept.contains(op))
      continue;
    OpSet candidate = kept;
    candidate.insert(op);
    Cut trial = solve(banning(candidate));
    if (trial.bytes <= target) {
      kept = std::move(candidate);
      cut = std::move(trial);
    }
  }
  LLVM_DEBUG(llvm::dbgs() << "kiln-remat: keeps " << kept.size() << " of " << items_.size()
                          << " expensive ops banned; saves " << cut.saved.size() << " values, " << cut.bytes << " B\n");
  return cut;
}

struct KilnRematPass : public impl::KilnRematPassBase<KilnRematPass> {
  using KilnRematPassBase::KilnRematPassBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto joint = module.lookupSymbol<mlir::func::FuncOp>("joint");
    if (!(memoryBudget >= 0.0 && memoryBudget <= 1.0)) {
      mlir::Operation *where = joint ? joint.getOperation() : module.getOperation();
      char budget[32];
      std::snprintf(budget, sizeof(budget), "%g", static_cast<double>(memoryBudget));
      where->emitError() << "kiln-remat: memory-budget = " << budget
                         << " is outside [0, 1] (1 = save what the min-cut over cheap ops saves, 0 = "
                            "recompute everything from the primal inputs)";
      return signalPassFailure();
    }
    if (!joint)
      return; // nothing to decide (already partitioned, or a hand-written test)
    JointSlices slices;
    if (mlir::failed(analyzeJoint(joint, slices)))
      return signalPassFailure();

    mlir::Builder builder(joint.getContext());
    joint->setAttr("kiln.memory_budget", builder.getF64FloatAttr(memoryBudget));
    joint.walk([](mlir::Operation *op) { op->removeAttr("kiln.saved"); });
    if (slices.forwardOnly)
      return;
    Rematerializer rematerializer(joint, slices);
    Cut cut = rematerializer.decide(memoryBudget);
    for (mlir::Value value : cut.saved)
      value.getDefiningOp()->setAttr("kiln.saved", builder.getUnitAttr());
    LLVM_DEBUG(llvm::dbgs() << "kiln-remat: saves " << cut.saved.size() << " values (" << cut.bytes << " B)\n");
  }
};

} // namespace
} // namespace kiln::passes
