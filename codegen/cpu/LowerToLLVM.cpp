// The kernel module's lowering: linalg on tensors -> LLVM dialect.
//
// The route (TOOLCHAIN.md's measured recipe, plus linalg elementwise fusion
// and empty-tensor elimination so results are computed in place):
//   kiln-keep-subnormals (exp, log, bf16 truncation keep IEEE subnormals)
//   math polynomial approximation (exp, log: vectorizable arith)
//   kiln-cpu-fuse-linalg-elementwise (linalg's elementwise fusion patterns,
//   Kiln's control), kiln-cpu-merge-generics (elementwise kernels merged
//   into one multi-result generic), canonicalize, cse
//   kiln-cpu-tile-rows (row fusions: one loop over row tiles), canonicalize, cse
//   eliminate-empty-tensors, one-shot-bufferize, kiln-cpu-hoist-tile-buffers,
//   kiln-cpu-in-place-branch, buffer-deallocation-pipeline
// The kiln-cpu-* passes are declared in kiln/codegen/Passes.td, one file
// each in cpu/passes/.
//   convert-linalg-to-loops, lower-affine, convert-scf-to-cf
//   expand-strided-metadata, finalize-memref-to-llvm, math-to-llvm,
//   math-to-libm (f64 tanh, sin, ...), arith/cf/func/index-to-llvm,
//   reconcile-unrealized-casts
#include "CpuBackend.h"

#include "KernelCache.h"
#include "kiln/codegen/Passes.h"

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

/// Makes every math op the polynomial approximations rewrite NaN-safe:
/// f(x) becomes select(isnan(x), x, f(select(isnan(x), 0, x))). The
/// polynomials clamp with unordered compares that let a NaN through and then
/// convert it with fptosi, which is poison in LLVM for NaN: where the NaN is a
/// known constant (a graph-break value baked into the next segment), LLVM
/// folds the whole result to poison and stores garbage (fuzzer seed 30000
/// graph 3383: gelu_tanh of x * NaN gave 0 or -6e29). With the guard the
/// polynomial never sees a NaN and a NaN argument gives NaN, as libm does.
void guardNaNs(ModuleOp kernels) {
  SmallVector<Operation *> ops;
  kernels.walk([&](Operation *op) {
    if (op->getNumOperands() == 1 && op->getNumResults() == 1 && isa<FloatType>(op->getResult(0).getType()) &&
        isa<math::ExpOp, math::Exp2Op, math::ExpM1Op, math::LogOp, math::Log2Op, math::Log1pOp, math::TanhOp,
            math::SinOp, math::CosOp, math::ErfOp, math::AtanOp, math::AsinOp, math::AcosOp, math::RsqrtOp>(op))
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    OpBuilder b(op);
    Location loc = op->getLoc();
    Value x = op->getOperand(0);
    Value nan = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, x, x);
    Value zero = b.create<arith::ConstantOp>(loc, b.getFloatAttr(x.getType(), 0.0));
    op->setOperand(0, b.create<arith::SelectOp>(loc, nan, zero, x));
    b.setInsertionPointAfter(op);
    auto guarded = b.create<arith::SelectOp>(loc, nan, x, op->getResult(0));
    op->getResult(0).replaceAllUsesExcept(guarded.getResult(), guarded);
  }
}

/// exp/log/... as polynomials on arith ops: LLVM vectorizes those loops,
/// while calls to libm's expf would stay scalar (~4x slower here). On hosts
/// without a bf16 conversion instruction, arith.extf/truncf of bf16 become
/// integer arithmetic (round to nearest even, NaN kept), which vectorizes.
LogicalResult approximateMath(ModuleOp kernels) {
  keepSubnormals(kernels, hostConvertsBF16());
  guardNaNs(kernels);
  RewritePatternSet patterns(kernels.getContext());
  populateMathPolynomialApproximationPatterns(patterns);
  if (!hostConvertsBF16())
    arith::populateExpandBFloat16Patterns(patterns);
  return applyPatternsAndFoldGreedily(kernels, std::move(patterns));
}


/// Tensor-level cleanup and fusion of the one-op-per-generic kernels, then
/// row tiling.
void addFusionPasses(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createKilnCpuFuseLinalgElementwisePass());
  pm.addNestedPass<func::FuncOp>(createKilnCpuMergeGenericsPass());
  pm.addNestedPass<func::FuncOp>(createKilnCpuCollapseReductionsPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // Before tiling, so the loop's destination is the kernel's result argument
  // (the tensor.empty a tiled loop starts from is not traced through the
  // loop by the later elimination).
  pm.addPass(bufferization::createEmptyTensorEliminationPass());
  pm.addNestedPass<func::FuncOp>(createKilnCpuTileRowsPass());
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
  pm.addNestedPass<func::FuncOp>(createKilnCpuHoistTileBuffersPass());
  pm.addNestedPass<func::FuncOp>(createKilnCpuInPlaceBranchPass());
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
    os << "kiln-keep-subnormals;kiln-nan-guard;math-polynomial-approximation(greedy);";
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
