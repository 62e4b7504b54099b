// codegen/cpu/CpuBackend.h - the CPU target's pieces (private to codegen/cpu).
//
//   emitKernel          kiln.fusion -> func.func @<kernel> (linalg on tensors)
//   lowerKernelsToLLVM  linalg on tensors -> bufferized loops -> LLVM dialect
//                       (the kiln-cpu-* passes of kiln/codegen/Passes.td)
//   OrcKernelLibrary    the ExecutionEngine (ORC JIT, -O2, host CPU) owning
//                       the code of one kernel module
//
// CpuTarget.cpp wraps them as a codegen::Target (kiln/codegen/Target.h);
// the target-neutral pieces (operand ABI, generalization, kernel cache,
// executables) are in codegen/.
#pragma once

#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include "GeneralizeKernel.h"
#include "KernelAbi.h"
#include "kiln/codegen/Target.h"
#include "kiln/ir/KilnOps.h"
#include "kiln/runtime/LaunchExecutable.h"

namespace mlir {
class DialectRegistry;
class ExecutionEngine;
class MLIRContext;
} // namespace mlir
namespace llvm::orc {
class LLJIT;
} // namespace llvm::orc

namespace kiln::codegen::cpu {

/// Adds to `registry` every dialect, bufferization model and LLVM IR
/// translation the CPU backend needs (on top of the kiln dialects).
void registerCpuBackend(mlir::DialectRegistry &registry);

/// Appends `func.func @<fusion.getKernel()>` to `kernels`.
///
/// Kernel ABI (destination passing, no results):
///   args 0..n-1: one memref per fusion operand, with the operand's static
///                shape and a fully dynamic strided layout
///                (`strided<[?, ...], offset: ?>`), so views with any strides
///                (stride 0 for broadcasts) pass without copies;
///   args n..   : one contiguous identity-layout memref per fusion result,
///                written by the kernel (the runtime owns the memory).
/// i1 tensors travel as i8 memrefs (one byte per element, 0 or 1).
/// The body is the fusion's ops as linalg.generic / linalg.fill on tensors,
/// read through `bufferization.to_tensor restrict` and written with
/// `bufferization.materialize_in_destination`. Errors are emitted as MLIR
/// diagnostics on the offending op.
/// `name` overrides the symbol (default: fusion.getKernel()).
/// A **row-split** kernel (isRowSplittable) is emitted with dim 0 dynamic
/// (`?`) in every memref, so the runtime can run it on disjoint ranges of
/// dim 0 on several threads (LaunchExecutable, `split_rows`).
mlir::LogicalResult emitKernel(kiln::ir::FusionOp fusion, mlir::ModuleOp kernels, llvm::StringRef name = {});

/// emitKernel for a shape-generic kernel named `name`: the ABI above, with
/// `?` for the dynamic dims of `generic` and its scalar arguments inserted
/// after the operands.
mlir::LogicalResult emitGenericKernel(kiln::ir::FusionOp fusion, const KernelGeneralization &generic,
                                      llvm::StringRef name, mlir::ModuleOp kernels);

/// "triple|cpu|sorted features" of the host, as the JIT targets it.
std::string hostTargetDescription();

/// Lowers a module of kernels from emitKernel to the LLVM dialect:
/// elementwise fusion, empty-tensor elimination, one-shot bufferize, buffer
/// deallocation, linalg -> loops -> cf, everything -> llvm. If `dump_dir` is
/// non-empty, writes `codegen-0-linalg.mlir` and `codegen-1-llvm.mlir` there.
mlir::LogicalResult lowerKernelsToLLVM(mlir::ModuleOp kernels, const std::string &dump_dir, std::string *error);

/// A stable description of everything lowerKernelsToLLVM does (the textual
/// pass pipeline with its options, plus the steps outside the pass manager),
/// hashed into the kernel cache key so a changed lowering misses the cache.
std::string loweringDescription(mlir::MLIRContext *context);

/// The JIT-compiled code of one kernel module. Kernels stay valid as long as
/// the library lives (executables hold it through a shared_ptr).
class OrcKernelLibrary final : public KernelLibrary {
public:
  ~OrcKernelLibrary() override;
  /// JIT-compiles an LLVM-dialect module at -O2 for the host CPU (its
  /// features: AVX-512 etc.). Null and `*error` on failure.
  static std::shared_ptr<OrcKernelLibrary> create(mlir::ModuleOp llvmModule, std::string *error);
  /// Same, and compiles eagerly: looks up every name in `kernels` (so LLVM
  /// runs here, not at the first lookup). With `keepObject`, the engine also
  /// keeps the object code for dumpObject.
  static std::shared_ptr<OrcKernelLibrary> create(mlir::ModuleOp llvmModule, const std::vector<std::string> &kernels,
                                               bool keepObject, std::string *error);
  /// Links already compiled object code (an ELF relocatable from dumpObject)
  /// into a fresh ORC LLJIT, without MLIR or LLVM codegen, and resolves every
  /// name in `kernels`. Null and `*error` if the object cannot be linked or a
  /// kernel is missing.
  static std::shared_ptr<OrcKernelLibrary> load(const std::string &object, const std::vector<std::string> &kernels,
                                             std::string *error);
  /// Writes the object code of a library made by create(..., keepObject=true).
  bool dumpObject(const std::string &path, std::string *error) const override;
  /// The packed entry point of kernel `name` (MLIR's `_mlir_<name>` wrapper),
  /// or null and `*error`.
  runtime::PackedKernel lookup(const std::string &name, std::string *error) const override;

private:
  OrcKernelLibrary() = default;
  std::unique_ptr<mlir::ExecutionEngine> engine_; // compiled here (create)
  std::unique_ptr<llvm::orc::LLJIT> jit_;         // loaded from an object (load)
  bool keepObject_ = false;
};

} // namespace kiln::codegen::cpu
