// codegen/cpu/CpuBackend.h - the CPU backend's pieces (private to codegen/).
//
//   emitKernel          kiln.fusion -> func.func @<kernel> (linalg on tensors)
//   lowerKernelsToLLVM  linalg on tensors -> bufferized loops -> LLVM dialect
//   KernelLibrary       the ExecutionEngine (ORC JIT, -O3, host CPU) owning
//                       the code of one kernel module
//   buildExecutable     func @forward / @backward -> runtime::LaunchExecutable
//
// Compiler.cpp strings them together; see codegen/README.md for the route.
#pragma once

#include <memory>
#include <string>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include "kiln/ir/KilnOps.h"
#include "kiln/runtime/LaunchExecutable.h"

namespace mlir {
class DialectRegistry;
class ExecutionEngine;
} // namespace mlir

namespace kiln::codegen::cpu {

/// Adds to `registry` every dialect, bufferization model and LLVM IR
/// translation the CPU backend needs (on top of the kiln dialects).
void registerCpuBackend(mlir::DialectRegistry &registry);

/// The dtype a kiln tensor element type is stored as at run time: f32, f16,
/// bf16, i64, i1 (one byte per element). Fails for anything else.
mlir::FailureOr<DType> dtypeOf(mlir::Type elementType);

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
mlir::LogicalResult emitKernel(kiln::ir::FusionOp fusion, mlir::ModuleOp kernels);

/// Lowers a module of kernels from emitKernel to the LLVM dialect:
/// elementwise fusion, empty-tensor elimination, one-shot bufferize, buffer
/// deallocation, linalg -> loops -> cf, everything -> llvm. If `dump_dir` is
/// non-empty, writes `codegen-0-linalg.mlir` and `codegen-1-llvm.mlir` there.
mlir::LogicalResult lowerKernelsToLLVM(mlir::ModuleOp kernels, const std::string &dump_dir, std::string *error);

/// The JIT-compiled code of one kernel module. Kernels stay valid as long as
/// the library lives (executables hold it through a shared_ptr).
class KernelLibrary {
public:
  ~KernelLibrary();
  /// JIT-compiles an LLVM-dialect module at -O3 for the host CPU (its
  /// features: AVX-512 etc.). Null and `*error` on failure.
  static std::shared_ptr<KernelLibrary> create(mlir::ModuleOp llvmModule, std::string *error);
  /// The packed entry point of kernel `name` (MLIR's `_mlir_<name>` wrapper),
  /// or null and `*error`.
  runtime::PackedKernel lookup(const std::string &name, std::string *error) const;

private:
  KernelLibrary() = default;
  std::unique_ptr<mlir::ExecutionEngine> engine_;
};

/// Builds the launch list of `func` (after the pipeline: only kiln.fusion,
/// kiln.matmul, kiln.transpose/broadcast/reshape, func.return). Kernels come
/// from `library`, which the executable keeps alive. Null and `*error` for an
/// op it cannot run.
std::shared_ptr<runtime::LaunchExecutable>
buildExecutable(mlir::func::FuncOp func, std::shared_ptr<const KernelLibrary> library, std::string *error);

} // namespace kiln::codegen::cpu
