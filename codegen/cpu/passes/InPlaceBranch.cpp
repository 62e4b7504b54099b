// kiln-cpu-in-place-branch: kernels the runtime may run with results over
// operands get a branch for equal addresses (codegen, CPU target; after
// bufferization).
#include "kiln/codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/Support/Debug.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

#define DEBUG_TYPE "kiln-cpu-in-place-branch"

namespace kiln::codegen {

#define GEN_PASS_DEF_KILNCPUINPLACEBRANCHPASS
#include "kiln/codegen/Passes.h.inc"

using namespace mlir;

namespace {

/// Kernels tagged `kiln.in_place = [k1, r1, k2, r2, ...]` (emitKernel,
/// inPlacePairs) may be called with argument k (an operand) and argument r
/// (a result) of a pair at the same address: the runtime's plan writes a
/// result over an operand that dies at that launch. The arguments are
/// noalias, so after bufferization the body gets a branch on the
/// addresses: if every pair's are equal, a copy of the body that reads each
/// operand k through its argument r (one pointer: LLVM sees the dependence,
/// and a loop that reads and writes the same element still vectorizes);
/// otherwise the body as it was (the runtime aliases all of a launch's
/// pairs or none, LaunchExecutable's memory plan). The copy is exact when
/// the body is one elementwise loop that reads each k and writes its r at
/// the same index (each element of k is read before r's element is
/// written, and never after) — what mergeElementwise makes of an
/// elementwise kernel; any other body reads copies of the operands.
struct KilnCpuInPlaceBranchPass : public impl::KilnCpuInPlaceBranchPassBase<KilnCpuInPlaceBranchPass> {
  using KilnCpuInPlaceBranchPassBase::KilnCpuInPlaceBranchPassBase;

  /// The body is one all-parallel linalg.generic that reads each operand
  /// (through casts) only with identity maps and writes each result with an
  /// identity map; other uses of both are size queries.
  static bool oneElementwiseLoop(Block &entry, ArrayRef<std::pair<Value, Value>> pairs) {
    linalg::GenericOp loop;
    for (Operation &op : entry.without_terminator()) {
      if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
        if (loop || generic.getNumReductionLoops() != 0)
          return false;
        loop = generic;
      } else if (isa<linalg::LinalgOp>(op) || op.getNumRegions() != 0) {
        return false;
      }
    }
    if (!loop)
      return false;
    for (auto [operand, result] : pairs) {
      SmallVector<Value> aliases{operand};
      for (size_t i = 0; i < aliases.size(); ++i)
        for (OpOperand &use : aliases[i].getUses()) {
          Operation *user = use.getOwner();
          if (isa<memref::DimOp>(user))
            continue;
          if (auto cast = dyn_cast<memref::CastOp>(user)) {
            aliases.push_back(cast.getResult());
            continue;
          }
          if (user != loop.getOperation() || !loop.isDpsInput(&use) ||
              !loop.getMatchingIndexingMap(&use).isIdentity())
            return false;
        }
      bool written = false;
      for (OpOperand &use : result.getUses()) {
        Operation *user = use.getOwner();
        if (isa<memref::DimOp>(user))
          continue;
        if (user != loop.getOperation() || !loop.isDpsInit(&use) || !loop.getMatchingIndexingMap(&use).isIdentity())
          return false;
        written = true;
      }
      if (!written)
        return false;
    }
    return true;
  }

  /// A contiguous copy of `operand` (its type, via memref.cast).
  static Value copyOf(OpBuilder &b, Location loc, Value operand) {
    auto type = cast<MemRefType>(operand.getType());
    SmallVector<Value> sizes;
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (type.isDynamicDim(d))
        sizes.push_back(b.create<memref::DimOp>(loc, operand, d));
    Value copy = b.create<memref::AllocOp>(loc, MemRefType::get(type.getShape(), type.getElementType()), sizes);
    b.create<memref::CopyOp>(loc, operand, copy);
    return b.create<memref::CastOp>(loc, type, copy);
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    auto tag = func->getAttrOfType<DenseI64ArrayAttr>("kiln.in_place");
    if (!tag)
      return;
    func->removeAttr("kiln.in_place");
    Block &entry = func.getBody().front();
    SmallVector<std::pair<Value, Value>> pairs;
    for (size_t i = 0; i + 1 < tag.size(); i += 2)
      pairs.emplace_back(entry.getArgument(tag[i]), entry.getArgument(tag[i + 1]));
    const bool direct = oneElementwiseLoop(entry, pairs);

    Location loc = func.getLoc();
    OpBuilder b = OpBuilder::atBlockBegin(&entry);
    Value all;
    for (auto [operand, result] : pairs) {
      Value same = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                           b.create<memref::ExtractAlignedPointerAsIndexOp>(loc, operand),
                                           b.create<memref::ExtractAlignedPointerAsIndexOp>(loc, result));
      all = all ? b.create<arith::AndIOp>(loc, all, same).getResult() : same;
    }
    auto branch = b.create<scf::IfOp>(loc, all, /*withElseRegion=*/true);
    SmallVector<Operation *> body;
    for (auto it = std::next(branch->getIterator()); &*it != entry.getTerminator(); ++it)
      body.push_back(&*it);

    // All pairs at one address: read each operand through its result (in
    // a copy taken first, unless the body is one elementwise loop); only the
    // result pointer touches that memory, as noalias requires.
    OpBuilder t = OpBuilder::atBlockTerminator(branch.thenBlock());
    IRMapping fast;
    for (auto [operand, result] : pairs) {
      Value through = t.create<memref::CastOp>(loc, operand.getType(), result);
      fast.map(operand, direct ? through : copyOf(t, loc, through));
    }
    for (Operation *op : body)
      t.clone(*op, fast);

    // Otherwise the body as it was.
    for (Operation *op : body)
      op->moveBefore(branch.elseBlock()->getTerminator());
  }
};

} // namespace
} // namespace kiln::codegen
