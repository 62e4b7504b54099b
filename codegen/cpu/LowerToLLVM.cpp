// The kernel module's lowering: linalg on tensors -> LLVM dialect.
//
// The route (TOOLCHAIN.md's measured recipe, plus linalg elementwise fusion
// and empty-tensor elimination so results are computed in place):
//   kiln-keep-subnormals (exp, log, bf16 truncation keep IEEE subnormals)
//   math polynomial approximation (exp, log: vectorizable arith)
//   kiln-fuse-elementwise (linalg's elementwise fusion patterns, Kiln's
//   control; elementwise kernels then merged into one multi-result
//   generic), canonicalize, cse
//   kiln-tile-rows (row fusions: one loop over row tiles), canonicalize, cse
//   eliminate-empty-tensors, one-shot-bufferize, kiln-hoist-tile-buffers,
//   buffer-deallocation-pipeline
//   convert-linalg-to-loops, lower-affine, convert-scf-to-cf
//   expand-strided-metadata, finalize-memref-to-llvm, math-to-llvm,
//   math-to-libm (f64 tanh, sin, ...), arith/cf/func/index-to-llvm,
//   reconcile-unrealized-casts
#include "CpuBackend.h"

#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>

#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Transforms.h"
#include "mlir/Dialect/Linalg/Transforms/TilingInterfaceImpl.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

namespace kiln::codegen::cpu {

using namespace mlir;

namespace {

LogicalResult dump(ModuleOp module, const std::string &dir, const char *name, std::string *error) {
  if (dir.empty())
    return success();
  if (llvm::sys::fs::create_directories(dir)) {
    if (error)
      *error = "cannot create dump directory " + dir;
    return failure();
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(dir + "/" + name, ec);
  if (ec) {
    if (error)
      *error = "cannot write " + dir + "/" + name + ": " + ec.message();
    return failure();
  }
  module.print(os);
  return success();
}

/// The host converts f32 -> bf16 in hardware (AVX512-BF16 vcvtneps2bf16 or
/// AVX-NE-CONVERT). Without it LLVM 19 lowers `fptrunc float to bfloat` to
/// a scalar libcall (__truncsfbf2), which also may not resolve in the JIT.
/// KILN_BF16_SOFTWARE=1 forces the software conversion (for tests).
bool hostConvertsBF16() {
  static const bool native = [] {
    const char *force = std::getenv("KILN_BF16_SOFTWARE");
    if (force && *force && std::string(force) != "0")
      return false;
    llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
    return features.lookup("avx512bf16") || features.lookup("avxneconvert");
  }();
  return native;
}

// ---- kiln-keep-subnormals ----------------------------------------------------
//
// IEEE subnormals are kept, as in eager and in PyTorch's CPU kernels. Three
// parts of the lowering would flush them, and each is wrapped by a rewrite
// that sends subnormal cases around it (all selects, so loops stay vectorizable):
// - the math dialect's exp polynomial builds 2^n from exponent bits and
//   gives 0 below 2^-126 (x < -87.3): there exp(x) = exp(x/2)^2, whose half
//   is normal down to x = -174 and whose square rounds into the subnormal;
// - its log polynomial clamps the input to the smallest normal: a subnormal
//   x is scaled by 2^24 first, log(x) = log(x * 2^24) - 24 log 2;
// - the AVX512-BF16 / AVX-NE-CONVERT f32 -> bf16 instruction treats
//   subnormal inputs as zero: those round in integer arithmetic instead
//   (the same round-to-nearest-even on the bits that arith-expand-bf16 uses).

/// Below this x, exp(x) may be subnormal in f32 (log(2^-126) = -87.34).
constexpr float kExpSubnormalBelow = -87.0f;
/// The smallest normal f32, 2^-126.
constexpr float kMinNormalF32 = 1.17549435e-38f;

Value f32Constant(OpBuilder &b, Location loc, float v) {
  return b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(v));
}

/// exp(x) for f32 x, with exp(x/2)^2 where the result is subnormal.
void keepExpSubnormals(math::ExpOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value x = op.getOperand();
  Value tiny = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, x, f32Constant(b, loc, kExpSubnormalBelow));
  Value half = b.create<arith::MulFOp>(loc, x, f32Constant(b, loc, 0.5f));
  Value e = b.create<math::ExpOp>(loc, b.create<arith::SelectOp>(loc, tiny, half, x));
  Value squared = b.create<arith::MulFOp>(loc, e, e);
  op.replaceAllUsesWith(b.create<arith::SelectOp>(loc, tiny, squared, e).getResult());
  op.erase();
}

/// log(x) for f32 x, with a subnormal x scaled into the normal range first.
void keepLogSubnormals(math::LogOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value x = op.getOperand();
  Value tiny = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, x, f32Constant(b, loc, kMinNormalF32));
  Value scaled = b.create<arith::MulFOp>(loc, x, f32Constant(b, loc, 16777216.0f));  // 2^24
  Value l = b.create<math::LogOp>(loc, b.create<arith::SelectOp>(loc, tiny, scaled, x));
  Value shifted = b.create<arith::SubFOp>(loc, l, f32Constant(b, loc, 16.6355323f));  // 24 log 2
  op.replaceAllUsesWith(b.create<arith::SelectOp>(loc, tiny, shifted, l).getResult());
  op.erase();
}

/// f32 -> bf16 with subnormal inputs rounded on their bits (the hardware
/// conversion flushes them).
void keepTruncSubnormals(arith::TruncFOp op) {
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value x = op.getIn();
  auto i32 = [&](int32_t v) -> Value { return b.create<arith::ConstantOp>(loc, b.getI32IntegerAttr(v)); };
  Value magnitude = b.create<math::AbsFOp>(loc, x);
  Value tiny = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OLT, magnitude, f32Constant(b, loc, kMinNormalF32));
  Value bits = b.create<arith::BitcastOp>(loc, b.getI32Type(), x);
  Value bit16 = b.create<arith::AndIOp>(loc, b.create<arith::ShRUIOp>(loc, bits, i32(16)), i32(1));
  Value biased = b.create<arith::AddIOp>(loc, bits, b.create<arith::AddIOp>(loc, bit16, i32(0x7fff)));
  Value high = b.create<arith::TruncIOp>(loc, b.getI16Type(), b.create<arith::ShRUIOp>(loc, biased, i32(16)));
  Value rounded = b.create<arith::BitcastOp>(loc, b.getBF16Type(), high);
  Value hardware = b.create<arith::TruncFOp>(loc, b.getBF16Type(), x);
  op.replaceAllUsesWith(b.create<arith::SelectOp>(loc, tiny, rounded, hardware).getResult());
  op.erase();
}

/// Applies the three rewrites above to every scalar f32 exp, log and
/// f32 -> bf16 truncf of the kernels (the bodies of linalg.generic ops).
void keepSubnormals(ModuleOp kernels, bool hardwareBF16) {
  SmallVector<Operation *> ops;
  kernels.walk([&](Operation *op) {
    if (op->getNumResults() != 1 || !op->getResult(0).getType().isF32()) {
      auto trunc = dyn_cast<arith::TruncFOp>(op);
      if (hardwareBF16 && trunc && trunc.getType().isBF16() && trunc.getIn().getType().isF32())
        ops.push_back(op);
      return;
    }
    if (isa<math::ExpOp, math::LogOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    if (auto e = dyn_cast<math::ExpOp>(op))
      keepExpSubnormals(e);
    else if (auto l = dyn_cast<math::LogOp>(op))
      keepLogSubnormals(l);
    else
      keepTruncSubnormals(cast<arith::TruncFOp>(op));
  }
}

/// exp/log/... as polynomials on arith ops: LLVM vectorizes those loops,
/// while calls to libm's expf would stay scalar (~4x slower here). On hosts
/// without a bf16 conversion instruction, arith.extf/truncf of bf16 become
/// integer arithmetic (round to nearest even, NaN kept), which vectorizes.
LogicalResult approximateMath(ModuleOp kernels) {
  keepSubnormals(kernels, hostConvertsBF16());
  RewritePatternSet patterns(kernels.getContext());
  populateMathPolynomialApproximationPatterns(patterns);
  if (!hostConvertsBF16())
    arith::populateExpandBFloat16Patterns(patterns);
  return applyPatternsAndFoldGreedily(kernels, std::move(patterns));
}

/// The body of `generic` only yields one of its inputs: a broadcast or a
/// unit-dim copy (EmitKernel's broadcastRows / dropUnitDims).
bool isCopy(linalg::GenericOp generic) {
  Block &body = generic.getRegion().front();
  if (body.getOperations().size() != 1)
    return false;
  auto yielded = dyn_cast<BlockArgument>(body.getTerminator()->getOperand(0));
  return yielded && yielded.getArgNumber() < generic.getNumDpsInputs();
}

/// Cheap enough to compute once per consumer: at most four arith ops and no
/// division or math function (x - mean is; exp(x - max) is not).
bool isCheap(linalg::GenericOp generic) {
  Block &body = generic.getRegion().front();
  if (body.getOperations().size() > 5)
    return false;
  return llvm::all_of(body.without_terminator(), [](Operation &op) {
    return op.getDialect()->getNamespace() == "arith" && !isa<arith::DivFOp, arith::DivSIOp, arith::RemFOp>(op);
  });
}

/// Iterations of `op`'s loop nest: the product of its static loop ranges;
/// a dynamic range counts as large (2^31 - 1 for the whole nest).
int64_t loopIterations(linalg::LinalgOp op) {
  int64_t n = 1;
  for (int64_t size : op.getStaticLoopRanges())
    n = ShapedType::isDynamic(size) ? std::numeric_limits<int32_t>::max() : n * size;
  return n;
}

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
/// one generic. kiln-tile-rows then tiles one root whose producers are the
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

/// MLIR's linalg-fuse-elementwise-ops patterns (producer generics into
/// consumer generics, reshapes folded by expansion, constant folding) with
/// Kiln's control function. Ordinary kernels: a producer with one use is
/// fused (linalg's default; a tensor.dim, which only reads a size, is not
/// a use, and sizes are resolved to the kernel arguments'). Row kernels (`kiln.rows`): a producer read by a
/// broadcasting map (a per-row value read once per element) is fused only
/// if it is a copy, so sqrt(var + eps) stays one per row; a producer read
/// elementwise is fused if it has one use or is cheap (then recomputed in
/// each consumer: x - mean in the variance and in the output, so no [R, C]
/// temporary is left). Ordinary kernels are then merged into one generic
/// where they are elementwise (mergeElementwise).
struct FuseElementwisePass : public PassWrapper<FuseElementwisePass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseElementwisePass)
  StringRef getArgument() const final { return "kiln-fuse-elementwise"; }
  StringRef getDescription() const final { return "linalg elementwise fusion with Kiln's control"; }

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
    if (rowKernel)
      mergeRowResults(func);
    else
      mergeElementwise(func);
  }
};

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
struct TileRowsPass : public PassWrapper<TileRowsPass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(TileRowsPass)
  StringRef getArgument() const final { return "kiln-tile-rows"; }
  StringRef getDescription() const final { return "tile row kernels over rows and fuse producers"; }

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
      func.emitError("kiln-tile-rows: the tiled kernel has a cycle (internal error)");
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

/// Row kernels, after bufferization: the statically shaped buffers a tile
/// allocates inside the row loop (per-row sums, a tile of exp(x - max)) are
/// allocated once, at the function's entry, and reused by every tile. Valid
/// because each comes from a tensor.empty or a fill inside the loop body:
/// its contents never outlive one iteration. (MLIR's buffer-loop-hoisting
/// leaves these allocations in place.)
struct HoistTileBuffersPass : public PassWrapper<HoistTileBuffersPass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(HoistTileBuffersPass)
  StringRef getArgument() const final { return "kiln-hoist-tile-buffers"; }
  StringRef getDescription() const final { return "allocate row tiles' buffers once per kernel call"; }

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
struct InPlaceBranchPass : public PassWrapper<InPlaceBranchPass, OperationPass<func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(InPlaceBranchPass)
  StringRef getArgument() const final { return "kiln-in-place-branch"; }
  StringRef getDescription() const final { return "a branch for kernels run with results over operands"; }

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

/// Tensor-level cleanup and fusion of the one-op-per-generic kernels, then
/// row tiling.
void addFusionPasses(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(std::make_unique<FuseElementwisePass>());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // Before tiling, so the loop's destination is the kernel's result argument
  // (the tensor.empty a tiled loop starts from is not traced through the
  // loop by the later elimination).
  pm.addPass(bufferization::createEmptyTensorEliminationPass());
  pm.addNestedPass<func::FuncOp>(std::make_unique<TileRowsPass>());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

/// Tensors -> buffers; the kernel's results are written straight into the
/// destination arguments when the analysis allows (empty-tensor elimination).
void addBufferizationPasses(OpPassManager &pm) {
  pm.addPass(bufferization::createEmptyTensorEliminationPass());
  bufferization::OneShotBufferizationOptions options;
  options.bufferizeFunctionBoundaries = false; // kernel args are memrefs already
  pm.addPass(bufferization::createOneShotBufferizePass(options));
  pm.addPass(createCanonicalizerPass());
  pm.addNestedPass<func::FuncOp>(std::make_unique<HoistTileBuffersPass>());
  pm.addNestedPass<func::FuncOp>(std::make_unique<InPlaceBranchPass>());
  bufferization::BufferDeallocationPipelineOptions dealloc;
  bufferization::buildBufferDeallocationPipeline(pm, dealloc);
}

/// Buffers -> loops -> LLVM dialect.
void addLLVMPasses(OpPassManager &pm) {
  pm.addPass(createConvertLinalgToLoopsPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  // What has no LLVM intrinsic and no polynomial (f64 tanh, say) calls libm.
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
}

/// Everything after the math approximation.
void addLoweringPasses(OpPassManager &pm) {
  addFusionPasses(pm);
  addBufferizationPasses(pm);
  addLLVMPasses(pm);
}

} // namespace

std::string loweringDescription(MLIRContext *context) {
  // Built once per process: the pipeline is fixed at build time.
  static std::once_flag once;
  static std::string description;
  std::call_once(once, [&] {
    PassManager pm(context);
    addLoweringPasses(pm);
    llvm::raw_string_ostream os(description);
    os << "kiln-keep-subnormals;math-polynomial-approximation(greedy);";
    if (!hostConvertsBF16())
      os << "arith-expand-bf16(greedy);";
    pm.printAsTextualPipeline(os);
  });
  return description;
}

void registerCpuBackend(DialectRegistry &registry) {
  registry
      .insert<affine::AffineDialect, arith::ArithDialect, bufferization::BufferizationDialect, cf::ControlFlowDialect,
              func::FuncDialect, index::IndexDialect, LLVM::LLVMDialect, linalg::LinalgDialect, math::MathDialect,
              memref::MemRefDialect, scf::SCFDialect, tensor::TensorDialect>();
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerTilingInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
}

LogicalResult lowerKernelsToLLVM(ModuleOp kernels, const std::string &dump_dir, std::string *error) {
  if (failed(dump(kernels, dump_dir, "codegen-0-linalg.mlir", error)))
    return failure();
  if (failed(approximateMath(kernels))) {
    if (error)
      *error = "math approximation did not converge";
    return failure();
  }
  kernelCacheCounters().mlir_lowerings++;
  PassManager pm(kernels.getContext());
  addLoweringPasses(pm);
  // With a dump directory: the IR after every lowering pass that changed it
  // (function scope), for debugging the lowering itself.
  std::unique_ptr<llvm::raw_fd_ostream> passLog;
  if (!dump_dir.empty()) {
    std::error_code ec;
    passLog = std::make_unique<llvm::raw_fd_ostream>(dump_dir + "/codegen-passes.mlir", ec);
    if (!ec)
      pm.enableIRPrinting([](Pass *, Operation *) { return false; }, [](Pass *, Operation *) { return true; },
                          /*printModuleScope=*/false, /*printAfterOnlyOnChange=*/true,
                          /*printAfterOnlyOnFailure=*/false, *passLog);
  }
  if (failed(pm.run(kernels))) {
    if (error && error->empty())
      *error = "lowering the kernels to LLVM failed";
    return failure();
  }
  return dump(kernels, dump_dir, "codegen-1-llvm.mlir", error);
}

} // namespace kiln::codegen::cpu
