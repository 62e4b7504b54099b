// kiln-cpu-tile-rows: row kernels become one loop over row tiles with their
// producers fused in (codegen, CPU target).
#include "kiln/codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/Support/Debug.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Dialect/MemRef/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/DenseSet.h"

#include "LinalgUtils.h"

#define DEBUG_TYPE "kiln-cpu-tile-rows"

namespace kiln::codegen {

#define GEN_PASS_DEF_KILNCPUTILEROWSPASS
#include "kiln/codegen/Passes.h.inc"

using namespace mlir;

namespace {

/// The ops of `top` that `from` depends on, transitively: producers of its
/// operands and of values its nested ops use (not `from` itself).
llvm::DenseSet<Operation *> producersIn(Block &top, Operation *from) {
  llvm::DenseSet<Operation *> found;
  SmallVector<Operation *> pending = {from};
  while (!pending.empty()) {
    pending.pop_back_val()->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && def->getBlock() == &top && def != from && found.insert(def).second)
          pending.push_back(def);
    });
  }
  return found;
}

/// Bytes of one row tile of one tensor that the tiling aims for: a few
/// tensors' tiles (input, output, per-row temporaries) stay in a 48 KiB L1.
constexpr int64_t kRowTileBytes = 8 * 1024;

/// Row kernels (`kiln.rows` = R, the number of row dims): the linalg op with
/// the largest iteration space (the [R.., C..] output, or the last
/// reduction) is tiled over its row dims — 1 for all but the last row dim,
/// whose tile is the largest divisor of its size with a tile of at most
/// kRowTileBytes (1 when the sizes are dynamic) — and its producers are
/// fused into the loop (scf::tileConsumerAndFuseProducersUsingSCF; the
/// same tile-and-fuse as IREE's softmax dispatch). A producer whose value
/// is also stored (another kernel result) is yielded from the loop. Each row
/// is then read from memory once and re-read from L1 by the reductions and
/// the output computation. Divisor tiles keep every tile's shape static, so
/// the tile temporaries are hoisted out of the loop after bufferization.
struct KilnCpuTileRowsPass : public impl::KilnCpuTileRowsPassBase<KilnCpuTileRowsPass> {
  using KilnCpuTileRowsPassBase::KilnCpuTileRowsPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto rowsAttr = func->getAttrOfType<IntegerAttr>("kiln.rows");
    if (!rowsAttr)
      return;
    const int64_t rows = rowsAttr.getInt();
    // The root: the most iterations (static sizes; dynamic counts as large), last on ties.
    linalg::LinalgOp root;
    int64_t best = -1;
    for (Operation &op : func.getBody().front()) {
      auto linalgOp = dyn_cast<linalg::LinalgOp>(&op);
      if (!linalgOp || isa<linalg::FillOp>(op))
        continue;
      const int64_t iterations = loopIterations(linalgOp);
      if (iterations >= best) {
        best = iterations;
        root = linalgOp;
      }
    }
    if (!root || root.getNumLoops() <= static_cast<unsigned>(rows - 1))
      return;
    SmallVector<int64_t> ranges = root.getStaticLoopRanges();
    int64_t rowElements = 1;
    bool dynamic = ShapedType::isDynamic(ranges[rows - 1]);
    for (size_t d = rows; d < ranges.size(); ++d) {
      dynamic |= ShapedType::isDynamic(ranges[d]);
      rowElements *= ShapedType::isDynamic(ranges[d]) ? 1 : ranges[d];
    }
    int64_t tile = 1;
    if (!dynamic)
      for (int64_t t = ranges[rows - 1]; t >= 1; --t)
        if (ranges[rows - 1] % t == 0 && t * rowElements * 4 <= kRowTileBytes) {
          tile = t;
          break;
        }
    SmallVector<int64_t> sizes(ranges.size(), 0);
    for (int64_t d = 0; d < rows; ++d)
      sizes[d] = d == rows - 1 ? tile : 1;

    // The ops the root reads through (its producer cone): their values need
    // no replacement outside the loop unless something else uses them.
    Block &top = func.getBody().front();
    llvm::DenseSet<Operation *> cone = producersIn(top, root);
    cone.insert(root);
    IRRewriter rewriter(func.getContext());
    scf::SCFTilingOptions tiling;
    tiling.setTileSizes(getAsIndexOpFoldResult(func.getContext(), sizes));
    scf::SCFTileAndFuseOptions options;
    options.setTilingOptions(tiling);
    options.setFusionControlFn([&](tensor::ExtractSliceOp, OpResult producer, bool isDestination) {
      // Users inside the loop nest are the slices being fused; a tensor.dim
      // is a shape query, not a use of the data (it is resolved to an
      // argument's size after tiling).
      bool usedOutside = llvm::any_of(producer.getUsers(), [&](Operation *user) {
        return user->getBlock() == &top && !cone.contains(user) && !isa<tensor::DimOp>(user);
      });
      return std::make_tuple(true, !isDestination && usedOutside);
    });
    rewriter.setInsertionPoint(root);
    FailureOr<scf::SCFTileAndFuseResult> tiled =
        scf::tileConsumerAndFuseProducersUsingSCF(rewriter, cast<TilingInterface>(root.getOperation()), options);
    if (failed(tiled))
      return; // left untiled: still correct, one pass per linalg op
    // The loop's yielded values replace the originals only for ops the loop
    // does not depend on: a slice the fusion did not take still reads its
    // original value (computed before the loop), and so do the ops that
    // value needs.
    Operation *outer = tiled->loops.front().getOperation();
    llvm::DenseSet<Operation *> needed = producersIn(top, outer);
    for (auto [original, replacement] : tiled->replacements)
      rewriter.replaceUsesWithIf(original, replacement, [&](OpOperand &use) {
        Operation *user = top.findAncestorOpInBlock(*use.getOwner());
        return user && user != outer && !needed.contains(user);
      });
    // Sizes of dynamic dims (loop bounds, inits) are read from the kernel
    // arguments, not from the originals of the fused ops.
    {
      RewritePatternSet patterns(func.getContext());
      memref::populateResolveRankedShapedTypeResultDimsPatterns(patterns);
      memref::populateResolveShapedTypeResultDimsPatterns(patterns);
      tensor::DimOp::getCanonicalizationPatterns(patterns, func.getContext());
      (void)applyPatternsAndFoldGreedily(func, std::move(patterns));
    }
    // The fused producers' originals are dead now (they may read the loop's
    // yielded values); then a user of a yielded producer value (another
    // kernel result) may still come before the loop, which sits at the
    // root's position.
    for (bool erased = true; erased;) {
      erased = false;
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(top)))
        if (isOpTriviallyDead(&op)) {
          rewriter.eraseOp(&op);
          erased = true;
        }
    }
    if (!sortTopologically(&top)) {
      func.emitError("kiln-cpu-tile-rows: the tiled kernel has a cycle (internal error)");
      return signalPassFailure();
    }
    // Each loop-carried tensor gets its own tensor.empty (tagged, so CSE
    // keeps them apart): yielded producers that started from one shared
    // empty would otherwise be carried in one buffer.
    int64_t next = 0;
    for (LoopLikeOpInterface loop : tiled->loops)
      for (OpOperand &init : loop.getInitsMutable())
        if (auto empty = init.get().getDefiningOp<tensor::EmptyOp>()) {
          rewriter.setInsertionPoint(empty);
          auto fresh = cast<tensor::EmptyOp>(rewriter.clone(*empty));
          fresh->setAttr("kiln.carried", rewriter.getI64IntegerAttr(next++));
          init.set(fresh.getResult());
        }
    // A fused producer's init is a slice of a whole-tensor tensor.empty:
    // make it a tile-sized tensor.empty (a tile buffer, not an [R, C] one).
    RewritePatternSet patterns(func.getContext());
    tensor::populateFoldTensorEmptyPatterns(patterns);
    (void)applyPatternsAndFoldGreedily(func, std::move(patterns));
  }
};

} // namespace
} // namespace kiln::codegen
