// kiln-cpu-fuse-linalg-elementwise: linalg's elementwise fusion patterns
// with Kiln's control function, on each kernel function (codegen, CPU
// target; not the kiln-fuse pass of passes/, which forms kiln.fusion
// regions).
#include "kiln/codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/Support/Debug.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "LinalgUtils.h"

#define DEBUG_TYPE "kiln-cpu-fuse-linalg-elementwise"

namespace kiln::codegen {

#define GEN_PASS_DEF_KILNCPUFUSELINALGELEMENTWISEPASS
#include "kiln/codegen/Passes.h.inc"

using namespace mlir;

namespace {

/// MLIR's linalg-fuse-elementwise-ops patterns (producer generics into
/// consumer generics, reshapes folded by expansion, constant folding) with
/// Kiln's control function. Ordinary kernels: a producer with one use is
/// fused (linalg's default; a tensor.dim, which only reads a size, is not
/// a use, and sizes are resolved to the kernel arguments'). Row kernels (`kiln.rows`): a producer read by a
/// broadcasting map (a per-row value read once per element) is fused only
/// if it is a copy, so sqrt(var + eps) stays one per row; a producer read
/// elementwise is fused if it has one use or is cheap (then recomputed in
/// each consumer: x - mean in the variance and in the output, so no [R, C]
/// temporary is left). kiln-cpu-merge-generics runs next.
struct KilnCpuFuseLinalgElementwisePass : public impl::KilnCpuFuseLinalgElementwisePassBase<KilnCpuFuseLinalgElementwisePass> {
  using KilnCpuFuseLinalgElementwisePassBase::KilnCpuFuseLinalgElementwisePassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    MLIRContext *ctx = func.getContext();
    const bool rowKernel = func->hasAttr("kiln.rows");
    // Uses that read the data: a tensor.dim only asks for a size (dynamic
    // dims of shape-generic and row-split kernels).
    auto oneDataUse = [](Operation *producer) {
      return llvm::count_if(producer->getUsers(), [](Operation *user) { return !isa<tensor::DimOp>(user); }) == 1;
    };
    linalg::ControlFusionFn control = [rowKernel, oneDataUse](OpOperand *fused) {
      Operation *producer = fused->get().getDefiningOp();
      if (!producer)
        return false;
      auto generic = dyn_cast<linalg::GenericOp>(producer);
      auto consumer = dyn_cast<linalg::LinalgOp>(fused->getOwner());
      if (!rowKernel || !generic || !consumer)
        return oneDataUse(producer);
      if (!consumer.getMatchingIndexingMap(fused).isPermutation())
        return isCopy(generic);
      return oneDataUse(producer) || isCheap(generic);
    };
    RewritePatternSet patterns(ctx);
    linalg::populateElementwiseOpsFusionPatterns(patterns, control);
    linalg::populateFoldReshapeOpsByExpansionPatterns(patterns, control);
    affine::AffineApplyOp::getCanonicalizationPatterns(patterns, ctx);
    linalg::GenericOp::getCanonicalizationPatterns(patterns, ctx);
    tensor::ExpandShapeOp::getCanonicalizationPatterns(patterns, ctx);
    tensor::CollapseShapeOp::getCanonicalizationPatterns(patterns, ctx);
    ctx->getLoadedDialect<linalg::LinalgDialect>()->getCanonicalizationPatterns(patterns);
    linalg::populateConstantFoldLinalgOperations(patterns, control);
    // tensor.dim of an op's result -> of its init -> of a kernel argument.
    memref::populateResolveRankedShapedTypeResultDimsPatterns(patterns);
    tensor::DimOp::getCanonicalizationPatterns(patterns, ctx);
    GreedyRewriteConfig config;
    config.useTopDownTraversal = true;
    (void)applyPatternsAndFoldGreedily(func, std::move(patterns), config);
  }
};

} // namespace
} // namespace kiln::codegen
