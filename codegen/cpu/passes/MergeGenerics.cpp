// kiln-cpu-merge-generics: elementwise linalg.generic ops over one iteration
// space become one multi-result generic (codegen, CPU target).
#include "kiln/codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/Support/Debug.h"
#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

#include "LinalgUtils.h"

#define DEBUG_TYPE "kiln-cpu-merge-generics"

namespace kiln::codegen {

#define GEN_PASS_DEF_KILNCPUMERGEGENERICSPASS
#include "kiln/codegen/Passes.h.inc"

using namespace mlir;

namespace {

/// Elementwise generics over one iteration space (all loops parallel, equal
/// loop ranges; each value passed between them written and read through
/// identity maps; their values only stored or read by each other) become
/// one generic with a result per value the kernel stores: every element's
/// whole chain is computed in registers. linalg's producer-consumer fusion
/// keeps a producer with several consumers as its own loop and a full-size
/// temporary (a GELU recomputed next to its derivative reads exp(...) three
/// times: ten [N, 4d] temporaries and 16x the time); here a value with
/// several consumers is computed once per element and used by all of them.
/// Returns false (and changes nothing) when `generics` are not of that form.
bool mergeGenerics(func::FuncOp func, SmallVector<linalg::GenericOp> generics) {
  Block &block = func.getBody().front();
  if (generics.size() < 2)
    return false;
  const unsigned loops = generics.front().getNumLoops();
  const SmallVector<int64_t> ranges = generics.front().getStaticLoopRanges();
  llvm::DenseSet<Operation *> inSet;
  for (linalg::GenericOp generic : generics)
    inSet.insert(generic);
  for (linalg::GenericOp generic : generics) {
    if (generic.getNumLoops() != loops || generic.getNumReductionLoops() != 0 ||
        generic.getStaticLoopRanges() != ranges)
      return false;
    for (OpOperand &init : generic.getDpsInitsMutable())
      if (!generic.getMatchingIndexingMap(&init).isIdentity() || !generic.getMatchingBlockArgument(&init).use_empty() ||
          inSet.contains(init.get().getDefiningOp()))
        return false;
    for (OpOperand *input : generic.getDpsInputOperands())
      if (inSet.contains(input->get().getDefiningOp()) && !generic.getMatchingIndexingMap(input).isIdentity())
        return false;
    // The merged op is placed after the last generic: results may only be
    // stored or returned outside the set (anything else could feed back).
    for (Operation *user : generic->getUsers())
      if (!inSet.contains(user) && !isa<bufferization::MaterializeInDestinationOp, func::ReturnOp>(user))
        return false;
  }

  // Inputs from outside the set (deduplicated with their maps) and the
  // results stored outside it.
  SmallVector<Value> inputs, inits;
  SmallVector<AffineMap> maps, initMaps;
  llvm::DenseMap<std::pair<Value, AffineMap>, unsigned> inputIndex;
  SmallVector<OpResult> stored;
  for (linalg::GenericOp generic : generics) {
    for (OpOperand *input : generic.getDpsInputOperands()) {
      if (inSet.contains(input->get().getDefiningOp()))
        continue;
      auto key = std::make_pair(input->get(), generic.getMatchingIndexingMap(input));
      if (inputIndex.try_emplace(key, inputs.size()).second) {
        inputs.push_back(key.first);
        maps.push_back(key.second);
      }
    }
    for (OpResult result : generic->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *user) { return !inSet.contains(user); })) {
        stored.push_back(result);
        inits.push_back(generic.getDpsInitOperand(result.getResultNumber())->get());
        initMaps.push_back(generic.getIndexingMapMatchingResult(result));
      }
  }
  if (stored.empty())
    return false;
  maps.append(initMaps); // inputs' maps, then the results'

  SmallVector<Type> resultTypes;
  for (OpResult result : stored)
    resultTypes.push_back(result.getType());
  OpBuilder builder(generics.back());
  builder.setInsertionPointAfter(generics.back());
  SmallVector<utils::IteratorType> iterators(loops, utils::IteratorType::parallel);
  auto merged = builder.create<linalg::GenericOp>(
      generics.back().getLoc(), resultTypes, inputs, inits, maps, iterators,
      [&](OpBuilder &body, Location loc, ValueRange args) {
        llvm::DenseMap<Value, Value> scalar; // a set result -> its element in the merged body
        for (linalg::GenericOp generic : generics) {
          IRMapping mapping;
          for (OpOperand *input : generic.getDpsInputOperands()) {
            Value element = inSet.contains(input->get().getDefiningOp())
                                ? scalar.lookup(input->get())
                                : args[inputIndex.lookup({input->get(), generic.getMatchingIndexingMap(input)})];
            mapping.map(generic.getMatchingBlockArgument(input), element);
          }
          Block &original = generic.getRegion().front();
          for (Operation &op : original.without_terminator())
            body.clone(op, mapping);
          for (OpResult result : generic->getResults())
            scalar[result] = mapping.lookupOrDefault(original.getTerminator()->getOperand(result.getResultNumber()));
        }
        SmallVector<Value> yielded;
        for (OpResult result : stored)
          yielded.push_back(scalar.lookup(result));
        body.create<linalg::YieldOp>(loc, yielded);
      });
  for (auto [index, result] : llvm::enumerate(stored))
    result.replaceUsesWithIf(merged.getResult(index),
                             [&](OpOperand &use) { return !inSet.contains(use.getOwner()); });
  for (linalg::GenericOp generic : llvm::reverse(generics))
    generic->erase();
  // A result stored before the last generic is now stored after the merged
  // op (stores keep their order; their destinations are kernel arguments).
  Operation *last = merged;
  SmallVector<Operation *> stores;
  for (Operation &op : block)
    if (isa<bufferization::MaterializeInDestinationOp>(op) && op.isBeforeInBlock(merged) &&
        op.getOperand(0).getDefiningOp() == merged)
      stores.push_back(&op);
  for (Operation *store : stores) {
    store->moveAfter(last);
    last = store;
  }
  return true;
}

/// mergeGenerics over every op of an ordinary kernel (all must be generics).
bool mergeElementwise(func::FuncOp func) {
  SmallVector<linalg::GenericOp> generics;
  for (Operation &op : func.getBody().front()) {
    if (auto generic = dyn_cast<linalg::GenericOp>(op))
      generics.push_back(generic);
    else if (isa<linalg::LinalgOp>(op))
      return false;
  }
  return mergeGenerics(func, generics);
}

/// Row kernels: the generics that compute stored [R.., C..] results from
/// values of the row (all loops parallel, the kernel's largest iteration
/// space), and whose values are only stored or read by each other, become
/// one generic. kiln-cpu-tile-rows then tiles one root whose producers are the
/// whole kernel: every result is computed in the loop over row tiles, none
/// in a second pass over full-size intermediates kept for it (a softmax
/// recomputed in its backward yields both the probabilities and the input
/// gradient: 2 ms -> 0.3 ms on [256, 64] rows of 64).
bool mergeRowResults(func::FuncOp func) {
  Block &block = func.getBody().front();
  int64_t most = -1;
  for (Operation &op : block)
    if (auto generic = dyn_cast<linalg::GenericOp>(op))
      most = std::max(most, loopIterations(generic));
  SmallVector<linalg::GenericOp> set;
  for (Operation &op : block) {
    auto generic = dyn_cast<linalg::GenericOp>(op);
    if (generic && generic.getNumReductionLoops() == 0 && loopIterations(generic) == most &&
        llvm::any_of(generic->getUsers(), [](Operation *user) { return isa<bufferization::MaterializeInDestinationOp>(user); }))
      set.push_back(generic);
  }
  // Drop members whose values something outside the set reads (a
  // reduction, say), until none is left.
  for (bool changed = true; changed;) {
    changed = false;
    llvm::DenseSet<Operation *> inSet;
    for (linalg::GenericOp generic : set)
      inSet.insert(generic);
    auto it = llvm::find_if(set, [&](linalg::GenericOp generic) {
      return llvm::any_of(generic->getUsers(), [&](Operation *user) {
        return !inSet.contains(user) && !isa<bufferization::MaterializeInDestinationOp>(user);
      });
    });
    if (it != set.end()) {
      set.erase(it);
      changed = true;
    }
  }
  return mergeGenerics(func, set);
}

/// Merges elementwise generics into one multi-result generic: all of an
/// ordinary kernel's (mergeElementwise), or the result generics of a row
/// kernel (`kiln.rows`, mergeRowResults).
struct KilnCpuMergeGenericsPass : public impl::KilnCpuMergeGenericsPassBase<KilnCpuMergeGenericsPass> {
  using KilnCpuMergeGenericsPassBase::KilnCpuMergeGenericsPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    const bool merged = func->hasAttr("kiln.rows") ? mergeRowResults(func) : mergeElementwise(func);
    LLVM_DEBUG(llvm::dbgs() << "kiln-cpu-merge-generics: @" << func.getSymName() << (merged ? " merged" : " unchanged")
                            << "\n");
    (void)merged;
  }
};

} // namespace
} // namespace kiln::codegen
