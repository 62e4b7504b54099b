// kiln-remat: choose which forward values of func @joint backward loads
// (saved) and which it recomputes, under a memory budget.
//
// Recipe (rules and sources in passes/DESIGN.md):
//   1. slice @joint (JointGraph.h); the "cone" is the forward ops that the
//      values backward reads depend on;
//   2. build the min-cut network of AOTAutograd's
//      min_cut_rematerialization_partition over the cone and solve it with
//      Dinic's max-flow for a given set of banned (never recomputed) ops;
//   3. budget 1: ban every op that is not cheap (or that backward would
//      write out anyway); budget 0: ban nothing; in between, the budget is a
//      fraction of the budget-1 cut's peak activation memory: candidate
//      cuts come from a 0/1 knapsack over those expensive ops (keep banned
//      the ones whose recomputation costs the most FLOPs, within a byte
//      capacity) at several capacities; each candidate's peak and step time
//      are estimated by partitioning and fusing a copy of the module and
//      replaying its memory plan (estimate); the fastest candidate within
//      the target wins (none: the smallest), after a repair of faster
//      candidates just over it and a fix-up that bans back ops while the
//      peak still fits;
//   4. mark the producers of the saved values `kiln.saved` and @joint
//      `kiln.memory_budget`; kiln-partition builds @forward/@backward.
#include "JointGraph.h"

#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Passes.h"
#include "kiln/runtime/MemoryPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Debug.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
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
/// look many times cheaper than the matmuls next to them. The knapsack only
/// proposes candidate cuts (the estimate chooses), so it runs with both a
/// high weight (32, the fastest of {1, 32, 128} for the GPT step when it
/// alone chose) and a low one (4: a fused GELU recompute costs about a
/// fifth of the fc GEMM it spares since kernels compute each element's
/// chain in registers).
constexpr int64_t kPointwiseFlopWeight = 32;
constexpr int64_t kCheapPointwiseWeight = 4;

/// The step-time model that chooses among the cuts that fit a budget
/// (Rematerializer::estimate): a byte a fused kernel reads or writes costs
/// as much as flopsPerSecond / bytesPerSecond matmul FLOPs (the pass
/// options, from the compile target's codegen::CostModel; the CPU target's
/// 130 GFLOP/s and 26 GB/s give 5, bench/README.md), rounded to a whole number.
static int64_t flopsPerKernelByte(double flopsPerSecond, double bytesPerSecond) {
  return std::max<int64_t>(1, std::llround(flopsPerSecond / bytesPerSecond));
}

/// GEMM and convolution ops (FLOP models Matmul and Conv): their FLOPs
/// count as they are; every other op's (pools included) are weighted.
static bool isGemmLike(mlir::Operation *op) {
  return mlir::isa<ir::MatmulOp, ir::Conv2dOp, ir::Conv2dInputGradOp, ir::Conv2dWeightGradOp>(op);
}

static int64_t weightedFlops(mlir::Operation *op, int64_t pointwiseWeight = kPointwiseFlopWeight) {
  return isGemmLike(op) ? opFlops(op) : opFlops(op) * pointwiseWeight;
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
  /// Recomputation cost in matmul-FLOP equivalents (weightedFlops of the
  /// cone ops the cut leaves on backward's side).
  int64_t cost = 0;
  /// estimate(), once computed (peak -1: not yet, or the module does not
  /// partition).
  int64_t peak = -1;
  int64_t time = 0;
};

/// A cut's training step as compiled: peak activation bytes and time.
struct Estimate {
  int64_t peak = -1;
  int64_t time = 0;
};

/// The in-place candidates of an elementwise fusion, as codegen pairs them
/// (ir::inPlaceOperandPairs, the rule codegen/KernelAbi.cpp inPlacePairs uses): each result, in order, over
/// the first untaken operand of its type that is row-major (`strided`:
/// through a transpose or broadcast), whose memory (`rootOf`) is an op's
/// result or a donatable argument, read by no other operand and by nothing
/// after this op (`lastUse`, the return counted). The planner then takes
/// the launch's pairs only if every one is safe in its plan.
static std::vector<runtime::InPlace>
inPlaceCandidates(mlir::Operation &op, int index, const llvm::DenseSet<mlir::Value> &strided,
                  const std::function<mlir::Value(mlir::Value)> &rootOf,
                  const llvm::DenseMap<mlir::Value, int> &lastUse,
                  const std::function<bool(mlir::BlockArgument)> &donatable) {
  auto dies = [&](unsigned k) {
    mlir::Value operand = op.getOperand(k);
    mlir::Value root = rootOf(operand);
    if (auto argument = mlir::dyn_cast<mlir::BlockArgument>(root); argument && !donatable(argument))
      return false;
    if (strided.contains(operand) || lastUse.lookup(root) != index)
      return false;
    return llvm::count_if(op.getOperands(), [&](mlir::Value other) { return rootOf(other) == root; }) == 1;
  };
  std::vector<runtime::InPlace> pairs;
  for (auto [operand, result] : ir::inPlaceOperandPairs(&op, dies))
    pairs.push_back({operand, result});
  return pairs;
}

/// The arena `func` needs under the runtime's memory plan: `func` as a
/// planner problem (runtime/include/kiln/runtime/MemoryPlan.h) -- arguments
/// are inputs (`donatable`: a saved activation of @backward, lent after its
/// last read), each op one launch, a layout op's result a view of its
/// operand (row-major through reshapes only), every other result a fresh
/// slot; func.return's operands the outputs -- planned by plan_memory, the
/// function LaunchExecutable::Builder::finish calls. Returns the donating
/// plan's arena (@backward runs donating; without donatable arguments it is
/// the plain plan's).
static int64_t replayArena(mlir::func::FuncOp func, const std::function<bool(mlir::BlockArgument)> &donatable) {
  mlir::Block &body = func.getBody().front();
  runtime::PlanProblem problem;
  llvm::DenseMap<mlir::Value, int> slotOf;
  llvm::DenseSet<mlir::Value> strided;
  auto rootOf = [&](mlir::Value value) {
    int s = slotOf.lookup(value);
    while (problem.slots[s].base >= 0)
      s = problem.slots[s].base;
    return s;
  };
  std::vector<mlir::Value> valueOf; // slot -> value
  auto addSlot = [&](mlir::Value value, runtime::PlanSlot slot) {
    slotOf[value] = static_cast<int>(problem.slots.size());
    problem.slots.push_back(slot);
    valueOf.push_back(value);
  };
  for (mlir::BlockArgument argument : body.getArguments())
    addSlot(argument, runtime::PlanSlot::input(valueBytes(argument), donatable(argument)));
  // Last use of each memory root, for the in-place candidates.
  llvm::DenseMap<mlir::Value, int> lastUse;
  auto rootValue = [&](mlir::Value value) { return valueOf[rootOf(value)]; };
  int index = 0;
  for (mlir::Operation &op : body) {
    if (auto ret = mlir::dyn_cast<mlir::func::ReturnOp>(op)) {
      for (mlir::Value v : ret.getOperands()) {
        problem.outputs.push_back(slotOf.lookup(v));
        lastUse[rootValue(v)] = index;
      }
      break;
    }
    for (mlir::Value v : op.getOperands())
      lastUse[rootValue(v)] = index;
    if (ir::isLayoutOp(&op)) {
      mlir::Value in = op.getOperand(0), out = op.getResult(0);
      if (!mlir::isa<ir::ReshapeOp>(op) || strided.contains(in))
        strided.insert(out);
      addSlot(out, runtime::PlanSlot::view(valueBytes(out), index, slotOf.lookup(in), !strided.contains(out)));
    } else {
      for (mlir::Value r : op.getResults())
        addSlot(r, runtime::PlanSlot::produced(valueBytes(r), index));
    }
    ++index;
  }
  // Launches, with the in-place candidates (lastUse is complete now).
  index = 0;
  for (mlir::Operation &op : body) {
    if (mlir::isa<mlir::func::ReturnOp>(op))
      break;
    runtime::PlanLaunch launch;
    for (mlir::Value v : op.getOperands())
      launch.operands.push_back(slotOf.lookup(v));
    for (mlir::Value r : op.getResults())
      launch.results.push_back(slotOf.lookup(r));
    launch.in_place = inPlaceCandidates(op, index, strided, rootValue, lastUse, donatable);
    problem.launches.push_back(std::move(launch));
    ++index;
  }
  return runtime::plan_memory(problem).donating_arena_bytes;
}

class Rematerializer {
public:
  /// `flopsPerKernelByte`: the step-time model's cost of a kernel byte in
  /// matmul FLOPs (the target's flops/s over bytes/s).
  Rematerializer(mlir::func::FuncOp joint, const JointSlices &slices, int64_t flopsPerKernelByte)
      : joint_(joint), slices_(slices), flopsPerKernelByte_(flopsPerKernelByte) {
    collectCone();
  }

  /// The decision for `budget` in [0, 1].
  Cut decide(double budget);
  /// After decide() with a budget in (0, 1) that estimated: the target and
  /// the budget-1 cut's estimated peak (bytes); -1 otherwise.
  int64_t target() const { return target_; }
  int64_t fastestPeak() const { return fastestPeak_; }

private:
  void collectCone();
  bool materializedInBackward(mlir::Operation *op) const;
  int64_t recomputeCost(mlir::Operation *item, int64_t pointwiseWeight) const;
  Cut solve(const OpSet &banned) const;
  OpSet knapsack(int64_t capacity, const llvm::DenseMap<mlir::Operation *, int64_t> &cost) const;
  Estimate estimate(const Cut &cut) const;
  Estimate replayCut(const Cut &cut) const;

  mlir::func::FuncOp joint_;
  const JointSlices &slices_;
  std::vector<mlir::Operation *> cone_;  // program order
  OpSet permanent_;                      // never recomputed
  OpSet expensive_;                      // recomputed only under a budget < 1 (the knapsack items)
  std::vector<mlir::Operation *> items_; // expensive_, program order
  OpSet coneSet_;
  llvm::DenseMap<mlir::Operation *, int64_t> itemCost_; // recomputeCost of each item
  /// The same with elementwise FLOPs at kCheapPointwiseWeight: a second
  /// family of candidate cuts, which recomputes elementwise chains first.
  llvm::DenseMap<mlir::Operation *, int64_t> itemCostCheapPointwise_;
  mutable std::map<std::vector<const void *>, Estimate> estimates_; // by saved values (program order)
  int64_t target_ = -1, fastestPeak_ = -1;
  int64_t flopsPerKernelByte_;
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
  for (mlir::Operation *item : items_) {
    itemCost_[item] = recomputeCost(item, kPointwiseFlopWeight);
    itemCostCheapPointwise_[item] = recomputeCost(item, kCheapPointwiseWeight);
  }
}

/// What recomputing expensive op `item` would cost, in matmul-FLOP
/// equivalents: its own FLOPs and those of the cheap ops it needs that
/// nothing else provides (its cone ancestors up to other expensive ops,
/// never-recomputed ops, primals and forward outputs).
int64_t Rematerializer::recomputeCost(mlir::Operation *item, int64_t pointwiseWeight) const {
  int64_t cost = weightedFlops(item, pointwiseWeight);
  OpSet seen{item};
  llvm::SmallVector<mlir::Value> worklist(item->getOperands());
  while (!worklist.empty()) {
    mlir::Value value = worklist.pop_back_val();
    mlir::Operation *op = value.getDefiningOp();
    if (!op || !coneSet_.contains(op) || slices_.forwardOutputs.contains(value) || expensive_.contains(op) ||
        permanent_.contains(op) || !seen.insert(op).second)
      continue;
    cost += weightedFlops(op, pointwiseWeight);
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
    if (sinkSide[in.lookup(op)])
      cut.cost += weightedFlops(op);
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

/// Peak activation bytes of a training step under `cut`: the saved bytes
/// (held from the start of @forward, whose results are allocated when it
/// starts, to the end of @backward) plus the larger of the two arenas
/// (replayArena: the runtime's memory planner on each function). Estimated
/// on a copy of the module that kiln-partition (following the cut's
/// kiln.saved marks) and kiln-fuse turn into @forward and @backward as the
/// pipeline will. -1 if the copy does not
/// partition.
Estimate Rematerializer::estimate(const Cut &cut) const {
  std::vector<const void *> key;
  for (mlir::Value value : cut.saved)
    key.push_back(value.getAsOpaquePointer());
  auto [memo, inserted] = estimates_.try_emplace(std::move(key));
  if (inserted)
    memo->second = replayCut(cut);
  return memo->second;
}

Estimate Rematerializer::replayCut(const Cut &cut) const {
  mlir::func::FuncOp original = joint_;
  auto module = original->getParentOfType<mlir::ModuleOp>();
  mlir::IRMapping mapping;
  mlir::OwningOpRef<mlir::ModuleOp> copy(mlir::cast<mlir::ModuleOp>(module->clone(mapping)));
  mlir::Builder builder(module.getContext());
  auto joint = mlir::cast<mlir::func::FuncOp>(mapping.lookup(original.getOperation()));
  joint->setAttr("kiln.memory_budget", builder.getF64FloatAttr(0.0)); // marks "after kiln-remat"
  joint.walk([](mlir::Operation *op) { op->removeAttr("kiln.saved"); });
  for (mlir::Value value : cut.saved)
    mapping.lookup(value).getDefiningOp()->setAttr("kiln.saved", builder.getUnitAttr());
  mlir::PassManager pm(module.getContext(), mlir::ModuleOp::getOperationName());
  pm.enableVerifier(false); // the pipeline verifies the real module
  pm.addPass(createKilnPartitionPass());
  pm.addPass(createKilnFusePass());
  if (mlir::failed(pm.run(*copy)))
    return {};
  auto forward = copy->lookupSymbol<mlir::func::FuncOp>("forward");
  auto backward = copy->lookupSymbol<mlir::func::FuncOp>("backward");
  if (!forward || !backward)
    return {};

  // Results lend their memory until written (the planner's pools);
  // @backward's saved arguments are donated (run_donating) after their last
  // read; @forward donates nothing.
  const int64_t forwardArena = replayArena(forward, [](mlir::BlockArgument) { return false; });
  const int64_t backwardArena = replayArena(backward, [&](mlir::BlockArgument argument) {
    auto role = backward.getArgAttrOfType<mlir::StringAttr>(argument.getArgNumber(), "kiln.role");
    return role && role.getValue() == "saved";
  });
  // Time, in matmul-FLOP equivalents: GEMM FLOPs, and each kernel's bytes
  // read and written at flopsPerKernelByte_.
  int64_t time = 0;
  for (mlir::func::FuncOp func : {forward, backward})
    for (mlir::Operation &op : func.getBody().front()) {
      if (isGemmLike(&op)) {
        time += opFlops(&op);
      } else if (mlir::isa<ir::FusionOp>(op) || ir::isExternOp(&op)) { // kernels and pools: bytes moved
        for (mlir::Value value : op.getOperands())
          time += flopsPerKernelByte_ * valueBytes(value);
        for (mlir::Value value : op.getResults())
          time += flopsPerKernelByte_ * valueBytes(value);
      }
    }
  return {cut.bytes + std::max(forwardArena, backwardArena), time};
}

/// 0/1 knapsack by dynamic programming (as dp_knapsack in PyTorch's
/// torch/_functorch/_activation_checkpointing/knapsack.py): among the
/// expensive ops, the set to keep banned (saved, not recomputed) whose
/// recomputation would cost the most (recomputeCost) and whose result bytes
/// fit in `capacity`. Weights are rounded up
/// to 1/1000 of the capacity, so the chosen set always fits.
OpSet Rematerializer::knapsack(int64_t capacity, const llvm::DenseMap<mlir::Operation *, int64_t> &cost) const {
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
    value[i] = cost.lookup(items_[i]);
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
  if (maxCut.bytes <= minCut.bytes)
    return maxCut;
  {
    Estimate e = estimate(maxCut);
    maxCut.peak = e.peak;
    maxCut.time = e.time;
  }
  if (maxCut.peak < 0)
    return maxCut; // the module does not partition: kiln-partition reports why
  const int64_t target = static_cast<int64_t>(std::floor(budget * static_cast<double>(maxCut.peak)));
  target_ = target;
  fastestPeak_ = maxCut.peak;

  // Candidates: the knapsack's cut at kSteps capacities between the min
  // cut's and the max cut's saved bytes (distinct cuts only), with the min
  // and max cuts themselves.
  auto banning = [&](const OpSet &kept) {
    OpSet banned = permanent_;
    banned.insert(kept.begin(), kept.end());
    return banned;
  };
  struct Candidate {
    Cut cut;
    OpSet kept;
  };
  std::vector<Candidate> candidates;
  auto consider = [&](Cut cut, OpSet kept) {
    for (const Candidate &other : candidates)
      if (other.cut.saved == cut.saved)
        return;
    if (cut.peak < 0) {
      Estimate e = estimate(cut);
      cut.peak = e.peak;
      cut.time = e.time;
    }
    if (cut.peak >= 0)
      candidates.push_back({std::move(cut), std::move(kept)});
  };
  consider(maxCut, expensive_);
  consider(minCut, OpSet());
  // Two families of knapsack cuts: item costs with elementwise FLOPs at
  // kPointwiseFlopWeight (keeps elementwise chains, recomputes matmuls
  // first) and at kCheapPointwiseWeight (the other way round).
  constexpr int kSteps = 16;
  for (const auto *cost : {&itemCost_, &itemCostCheapPointwise_})
    for (int step = 1; step < kSteps; ++step) {
      OpSet kept = knapsack((maxCut.bytes - minCut.bytes) * step / kSteps, *cost);
      consider(solve(banning(kept)), kept);
    }
  // The fastest candidate within the target; if none fits, the smallest.
  auto better = [&](const Candidate &a, const Candidate &b) {
    const bool aFits = a.cut.peak <= target, bFits = b.cut.peak <= target;
    if (aFits != bFits)
      return aFits;
    if (aFits)
      return a.cut.time != b.cut.time ? a.cut.time < b.cut.time : a.cut.peak < b.cut.peak;
    return a.cut.peak != b.cut.peak ? a.cut.peak < b.cut.peak : a.cut.time < b.cut.time;
  };
  Candidate best = *std::min_element(candidates.begin(), candidates.end(), better);
  LLVM_DEBUG(llvm::dbgs() << "kiln-remat: budget " << budget << ": max cut peak " << maxCut.peak << " B, target "
                          << target << " B; " << candidates.size() << " candidates, best saves " << best.cut.bytes
                          << " B, peak " << best.cut.peak << " B\n");

  // Repair: a candidate faster than the best that does not fit (at most
  // kRepairSlack over the target; the fastest two) recomputes one more
  // expensive op at a time — the one that lowers its peak most per unit of
  // time added — until it fits, for at most kRepairSteps ops.
  constexpr double kRepairSlack = 1.15;
  constexpr size_t kRepairStarts = 2, kRepairSteps = 3, kRepairTrials = 8;
  std::vector<const Candidate *> starts;
  for (const Candidate &candidate : candidates)
    if (candidate.cut.peak > target && candidate.cut.peak <= kRepairSlack * static_cast<double>(target) &&
        (best.cut.peak > target || candidate.cut.time < best.cut.time))
      starts.push_back(&candidate);
  std::sort(starts.begin(), starts.end(),
            [](const Candidate *a, const Candidate *b) { return a->cut.time < b->cut.time; });
  if (starts.size() > kRepairStarts)
    starts.resize(kRepairStarts);
  for (const Candidate *start : starts) {
    Candidate current = *start;
    for (size_t step = 0; step < kRepairSteps && current.cut.peak > target; ++step) {
      // Trials ranked by saved bytes dropped per recompute cost added (no
      // estimate needed); the first kRepairTrials are estimated.
      std::vector<Candidate> trials;
      for (mlir::Operation *op : items_) {
        if (!current.kept.contains(op))
          continue;
        OpSet kept = current.kept;
        kept.erase(op);
        Cut trial = solve(banning(kept));
        if (trial.bytes < current.cut.bytes)
          trials.push_back({std::move(trial), std::move(kept)});
      }
      auto yield = [&](const Candidate &c) {
        return static_cast<double>(current.cut.bytes - c.cut.bytes) /
               static_cast<double>(std::max<int64_t>(1, c.cut.cost - current.cut.cost));
      };
      std::stable_sort(trials.begin(), trials.end(),
                       [&](const Candidate &a, const Candidate &b) { return yield(a) > yield(b); });
      if (trials.size() > kRepairTrials)
        trials.resize(kRepairTrials);
      std::optional<Candidate> next;
      double bestGain = 0.0;
      for (Candidate &candidate : trials) {
        Cut &trial = candidate.cut;
        Estimate e = estimate(trial);
        if (e.peak < 0 || e.peak >= current.cut.peak)
          continue;
        trial.peak = e.peak;
        trial.time = e.time;
        const double gain = static_cast<double>(current.cut.peak - trial.peak) /
                            static_cast<double>(std::max<int64_t>(1, trial.time - current.cut.time));
        if (!next || gain > bestGain) {
          bestGain = gain;
          next = std::move(candidate);
        }
      }
      if (!next)
        break;
      current = std::move(*next);
    }
    if (better(current, best))
      best = std::move(current);
  }

  // Fix-up: ban back each expensive op the best cut recomputes, costliest
  // first, when the peak still fits and the step is faster.
  if (best.cut.peak <= target) {
    int64_t minArena = std::numeric_limits<int64_t>::max();
    for (const Candidate &candidate : candidates)
      minArena = std::min(minArena, candidate.cut.peak - candidate.cut.bytes);
    std::vector<mlir::Operation *> order = items_;
    std::stable_sort(order.begin(), order.end(),
                     [&](mlir::Operation *a, mlir::Operation *b) { return itemCost_.lookup(a) > itemCost_.lookup(b); });
    for (mlir::Operation *op : order) {
      if (best.kept.contains(op))
        continue;
      OpSet kept = best.kept;
      kept.insert(op);
      Cut trial = solve(banning(kept));
      if (trial.saved == best.cut.saved) {
        best.kept = std::move(kept);
        continue;
      }
      // Not estimated (each estimate partitions and fuses a copy) when its
      // saved bytes cannot fit next to the smallest arenas of any candidate.
      if (trial.bytes + minArena > target)
        continue;
      Estimate e = estimate(trial);
      trial.peak = e.peak;
      trial.time = e.time;
      if (trial.peak >= 0 && trial.peak <= target && trial.time < best.cut.time)
        best = {std::move(trial), std::move(kept)};
    }
  }
  LLVM_DEBUG(llvm::dbgs() << "kiln-remat: saves " << best.cut.saved.size() << " values, " << best.cut.bytes
                          << " B; estimated peak " << best.cut.peak << " B of target " << target << " B\n");
  return best.cut;
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
    Rematerializer rematerializer(joint, slices, flopsPerKernelByte(flopsPerSecond, bytesPerSecond));
    Cut cut = rematerializer.decide(memoryBudget);
    for (mlir::Value value : cut.saved)
      value.getDefiningOp()->setAttr("kiln.saved", builder.getUnitAttr());
    joint->removeAttr("kiln.remat_peak");
    if (rematerializer.target() >= 0 && cut.peak >= 0)
      joint->setAttr("kiln.remat_peak", builder.getDenseI64ArrayAttr({cut.peak, rematerializer.target(),
                                                                      rematerializer.fastestPeak()}));
    LLVM_DEBUG(llvm::dbgs() << "kiln-remat: saves " << cut.saved.size() << " values (" << cut.bytes << " B)\n");
  }
};

} // namespace
} // namespace kiln::passes
