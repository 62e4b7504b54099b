// The kernel module's lowering: linalg on tensors -> LLVM dialect.
//
// The route (TOOLCHAIN.md's measured recipe, plus linalg elementwise fusion
// and empty-tensor elimination so results are computed in place):
//   math polynomial approximation (exp, log: vectorizable arith)
//   linalg-fuse-elementwise-ops, canonicalize, cse
//   eliminate-empty-tensors, one-shot-bufferize, buffer-deallocation-pipeline
//   convert-linalg-to-loops, lower-affine, convert-scf-to-cf
//   expand-strided-metadata, finalize-memref-to-llvm, math/arith/cf/func/index
//   -to-llvm, reconcile-unrealized-casts
#include "CpuBackend.h"

#include <cstdlib>
#include <mutex>
#include <string>

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
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
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

/// exp/log/... as polynomials on arith ops: LLVM vectorizes those loops,
/// while calls to libm's expf would stay scalar (~4x slower here). On hosts
/// without a bf16 conversion instruction, arith.extf/truncf of bf16 become
/// integer arithmetic (round to nearest even, NaN kept), which vectorizes.
LogicalResult approximateMath(ModuleOp kernels) {
  RewritePatternSet patterns(kernels.getContext());
  populateMathPolynomialApproximationPatterns(patterns);
  if (!hostConvertsBF16())
    arith::populateExpandBFloat16Patterns(patterns);
  return applyPatternsAndFoldGreedily(kernels, std::move(patterns));
}

/// Tensor-level cleanup and fusion of the one-op-per-generic kernels.
void addFusionPasses(OpPassManager &pm) {
  pm.addPass(createLinalgElementwiseOpFusionPass());
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
    os << "math-polynomial-approximation(greedy);";
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
  if (failed(pm.run(kernels))) {
    if (error && error->empty())
      *error = "lowering the kernels to LLVM failed";
    return failure();
  }
  return dump(kernels, dump_dir, "codegen-1-llvm.mlir", error);
}

} // namespace kiln::codegen::cpu
