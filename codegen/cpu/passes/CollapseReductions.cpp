// kiln-cpu-collapse-reductions: a full reduction over a contiguous tensor
// becomes one loop over its elements (codegen, CPU target).
#include "kiln/codegen/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "kiln-cpu-collapse-reductions"

namespace kiln::codegen {

#define GEN_PASS_DEF_KILNCPUCOLLAPSEREDUCTIONSPASS
#include "kiln/codegen/Passes.h.inc"

using namespace mlir;

namespace {

/// A memref whose elements are laid out row-major without gaps (any
/// offset): static strides equal to the suffix products of its sizes.
bool isContiguous(MemRefType type) {
  if (type.getLayout().isIdentity())
    return true;
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(getStridesAndOffset(type, strides, offset)))
    return false;
  int64_t expected = 1;
  for (int64_t d = type.getRank() - 1; d >= 0; --d) {
    const int64_t size = type.getDimSize(d);
    if (size == 1)
      continue;  // a unit dim's stride is never used
    if (ShapedType::isDynamic(strides[d]) || strides[d] != expected || ShapedType::isDynamic(size))
      return false;
    expected *= size;
  }
  return true;
}

/// The tensor can be read as one flat run of elements: a kernel argument
/// (bufferization.to_tensor of a contiguous memref) or a value this kernel
/// computes (bufferized into a fresh, identity-layout buffer).
bool readsContiguously(Value tensor) {
  if (auto toTensor = tensor.getDefiningOp<bufferization::ToTensorOp>())
    return isContiguous(cast<MemRefType>(toTensor.getMemref().getType()));
  return tensor.getDefiningOp() != nullptr;
}

/// A linalg.generic that reduces every dim of rank >= 2 inputs, each read
/// through the identity map from a contiguous tensor, into 0-d results.
bool isCollapsibleFullReduction(linalg::GenericOp generic) {
  if (generic.getNumLoops() < 2 || generic.getNumReductionLoops() != generic.getNumLoops())
    return false;
  for (OpOperand *input : generic.getDpsInputOperands())
    if (!generic.getMatchingIndexingMap(input).isIdentity() || !readsContiguously(input->get()))
      return false;
  return llvm::all_of(generic.getDpsInitsMutable(), [&](OpOperand &init) {
    return generic.getMatchingIndexingMap(&init).getNumResults() == 0;
  });
}

/// Full reductions (sum(x) over all dims of an [N, C, H, W] tensor) loop
/// over one dim of N*C*H*W elements instead of a nest whose innermost loop
/// is the last dim. The loop vectorizer then keeps VF x interleave partial
/// sums (the additions carry `reassoc`), so the result is as accurate as
/// eager's cascade sum on these sizes, where a nest with a short inner dim
/// adds every element to one accumulator in turn (kiln-fuzz seed 4000
/// graph 539: 6x eager's error against float64). The inputs are collapsed
/// with tensor.collapse_shape (linalg::collapseOpIterationDims), which
/// bufferizes to a view because each input is contiguous.
struct KilnCpuCollapseReductionsPass
    : public impl::KilnCpuCollapseReductionsPassBase<KilnCpuCollapseReductionsPass> {
  using KilnCpuCollapseReductionsPassBase::KilnCpuCollapseReductionsPassBase;

  void runOnOperation() override {
    SmallVector<linalg::GenericOp> candidates;
    getOperation().walk([&](linalg::GenericOp generic) {
      if (isCollapsibleFullReduction(generic))
        candidates.push_back(generic);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::GenericOp generic : candidates) {
      ReassociationIndices all;
      for (int64_t d = 0; d < static_cast<int64_t>(generic.getNumLoops()); ++d)
        all.push_back(d);
      rewriter.setInsertionPoint(generic);
      FailureOr<linalg::CollapseResult> collapsed =
          linalg::collapseOpIterationDims(cast<linalg::LinalgOp>(generic.getOperation()), {all}, rewriter);
      if (failed(collapsed))
        continue;  // left as a loop nest: correct, only less accurate
      rewriter.replaceOp(generic, collapsed->results);
    }
  }
};

} // namespace
} // namespace kiln::codegen
