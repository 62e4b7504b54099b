// kiln-cpu-hoist-tile-buffers: row tiles' buffers allocated once per kernel
// call (codegen, CPU target; after bufferization).
#include "kiln/codegen/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/Support/Debug.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#define DEBUG_TYPE "kiln-cpu-hoist-tile-buffers"

namespace kiln::codegen {

#define GEN_PASS_DEF_KILNCPUHOISTTILEBUFFERSPASS
#include "kiln/codegen/Passes.h.inc"

using namespace mlir;

namespace {

/// Row kernels, after bufferization: the statically shaped buffers a tile
/// allocates inside the row loop (per-row sums, a tile of exp(x - max)) are
/// allocated once, at the function's entry, and reused by every tile. Valid
/// because each comes from a tensor.empty or a fill inside the loop body:
/// its contents never outlive one iteration. (MLIR's buffer-loop-hoisting
/// leaves these allocations in place.)
struct KilnCpuHoistTileBuffersPass : public impl::KilnCpuHoistTileBuffersPassBase<KilnCpuHoistTileBuffersPass> {
  using KilnCpuHoistTileBuffersPassBase::KilnCpuHoistTileBuffersPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func->hasAttr("kiln.rows"))
      return;
    Block &entry = func.getBody().front();
    SmallVector<memref::AllocOp> allocs;
    func.walk([&](memref::AllocOp alloc) {
      if (alloc->getBlock() != &entry && alloc.getType().hasStaticShape() && alloc->getNumOperands() == 0 &&
          alloc->getParentOfType<scf::ForOp>())
        allocs.push_back(alloc);
    });
    for (memref::AllocOp alloc : allocs)
      alloc->moveBefore(&entry, entry.begin());
  }
};

} // namespace
} // namespace kiln::codegen
