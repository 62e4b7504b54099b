// codegen/cpu/CpuBackend.h - the CPU backend's pieces (private to codegen/).
//
//   emitKernel          kiln.fusion -> func.func @<kernel> (linalg on tensors)
//   lowerKernelsToLLVM  linalg on tensors -> bufferized loops -> LLVM dialect
//   KernelLibrary       the ExecutionEngine (ORC JIT, -O3, host CPU) owning
//                       the code of one kernel module
//   buildExecutable     func @forward / @backward -> runtime::LaunchExecutable
//   kernel cache        (KernelCache.cpp) key of a kernel module, verified
//                       read / atomic write of its object file on disk
//
// Compiler.cpp strings them together; see codegen/README.md for the route.
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
/// `name` overrides the symbol (default: fusion.getKernel()).
/// A **row-split** kernel (isRowSplittable) is emitted with dim 0 dynamic
/// (`?`) in every memref, so the runtime can run it on disjoint ranges of
/// dim 0 on several threads (LaunchExecutable, `split_rows`).
mlir::LogicalResult emitKernel(kiln::ir::FusionOp fusion, mlir::ModuleOp kernels, llvm::StringRef name = {});

/// The operands whose memory results of `fusion`'s kernel may take over
/// (runtime::InPlace, LaunchExecutable's memory plan). Only an elementwise
/// kernel (no reduction, no row fusion) has them: for each result in order,
/// the first operand not yet paired that has the result's type (shape and
/// dtype), is row-major, and dies here — its buffer (through views) is
/// produced in this function (or is a `saved` argument, which backward
/// donates), is not returned, and is read by no later op and by no other
/// operand of this fusion. emitKernel tags such a kernel `kiln.in_place =
/// [operand argument, result argument, ...]`, and the lowering gives it a
/// branch for equal addresses (LowerToLLVM.cpp, kiln-in-place-branch).
std::vector<runtime::InPlace> inPlacePairs(kiln::ir::FusionOp fusion);

/// True if dim 0 of `fusion` is one parallel loop shared by every operand,
/// result and body value: all are ranked with the same dim-0 size N >= 2
/// (an operand broadcast along dim 0 is a stride-0 view of that size) and
/// no reduction reduces dim 0. Elementwise kernels and row fusions over
/// leading rows are; a column sum is not. Slicing dim 0 then gives each
/// thread an independent kernel call computing the same values (per-row
/// reductions keep their order: the result does not depend on the thread
/// count).
bool isRowSplittable(kiln::ir::FusionOp fusion);

/// The element strides each operand of `fusion` has at run time: function
/// arguments, kernel and GEMM results are row-major (the runtime copies
/// non-contiguous inputs, LaunchExecutable::Builder::addInput); transpose,
/// broadcast (stride 0) and reshape (a view when PyTorch's view rule allows,
/// else a row-major copy) follow runtime::LaunchExecutable's rules. Kernels
/// are compiled for these strides (static memref layouts), which lets LLVM
/// vectorize loops over broadcast and transposed operands; the executable
/// builder checks each launch against them.
std::vector<std::vector<int64_t>> operandStrides(kiln::ir::FusionOp fusion);

/// The value whose memory `value` uses: looks through layout ops (views).
mlir::Value memoryRoot(mlir::Value value);

/// How one kernel is made shape-generic (automatic dynamic shapes,
/// kiln/ir/DynamicShapes.h). Built by comparing a kiln.fusion with the same
/// fusion of the graph traced at another size: every dim that differs is
/// dynamic (`?` in the kernel's memref types) and belongs to a *size class*
/// (the pair of its two sizes: dims of one class are equal at every size);
/// every float splat constant whose value differs (e.g. a mean's 1/N) is a
/// runtime scalar argument.
struct KernelGeneralization {
  /// Per fusion operand and per result: per dim, -1 (static) or a size class.
  std::vector<std::vector<int>> inputs, results;
  /// Per fusion operand: its strides where they agree at both sizes, else
  /// ShapedType::kDynamic.
  std::vector<std::vector<int64_t>> inputStrides;
  /// The same for each body op's result, in body order (yield excluded).
  std::vector<std::vector<int>> body;
  /// Per size class: (argument index over operands then results, dim) the
  /// kernel reads the size from (memref.dim).
  std::vector<std::pair<int, int>> sources;
  /// Body positions of the constants passed as scalar arguments, in order;
  /// each is a rank-0 memref of the constant's element type placed after the
  /// fusion operands and before the results.
  std::vector<int> scalarConstants;
};

/// The generalization of a row-split kernel (isRowSplittable): dim 0 of
/// every operand, result and body value is size class 0, read from the first
/// argument; nothing else is dynamic.
KernelGeneralization rowSplitGeneralization(kiln::ir::FusionOp fusion);

/// Compares `fusion` with `reference` (the same kernel of the graph at
/// another size). Fails with `*why` if they differ in anything but sizes and
/// float constants, or a dynamic size inside the body is not the size of any
/// kernel argument.
mlir::FailureOr<KernelGeneralization> generalizeKernel(kiln::ir::FusionOp fusion, kiln::ir::FusionOp reference,
                                                       std::string *why);

/// emitKernel for a shape-generic kernel named `name`: the ABI above, with
/// `?` for the dynamic dims of `generic` and its scalar arguments inserted
/// after the operands.
mlir::LogicalResult emitGenericKernel(kiln::ir::FusionOp fusion, const KernelGeneralization &generic,
                                      llvm::StringRef name, mlir::ModuleOp kernels);

/// The values of `fusion`'s scalar-argument constants (generic.scalarConstants).
std::vector<double> scalarArguments(kiln::ir::FusionOp fusion, const KernelGeneralization &generic);

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
class KernelLibrary {
public:
  ~KernelLibrary();
  /// JIT-compiles an LLVM-dialect module at -O3 for the host CPU (its
  /// features: AVX-512 etc.). Null and `*error` on failure.
  static std::shared_ptr<KernelLibrary> create(mlir::ModuleOp llvmModule, std::string *error);
  /// Same, and compiles eagerly: looks up every name in `kernels` (so LLVM
  /// runs here, not at the first lookup). With `keepObject`, the engine also
  /// keeps the object code for dumpObject.
  static std::shared_ptr<KernelLibrary> create(mlir::ModuleOp llvmModule, const std::vector<std::string> &kernels,
                                               bool keepObject, std::string *error);
  /// Links already compiled object code (an ELF relocatable from dumpObject)
  /// into a fresh ORC LLJIT, without MLIR or LLVM codegen, and resolves every
  /// name in `kernels`. Null and `*error` if the object cannot be linked or a
  /// kernel is missing.
  static std::shared_ptr<KernelLibrary> load(const std::string &object, const std::vector<std::string> &kernels,
                                             std::string *error);
  /// Writes the object code of a library made by create(..., keepObject=true).
  bool dumpObject(const std::string &path, std::string *error) const;
  /// The packed entry point of kernel `name` (MLIR's `_mlir_<name>` wrapper),
  /// or null and `*error`.
  runtime::PackedKernel lookup(const std::string &name, std::string *error) const;

private:
  KernelLibrary() = default;
  std::unique_ptr<mlir::ExecutionEngine> engine_; // compiled here (create)
  std::unique_ptr<llvm::orc::LLJIT> jit_;         // loaded from an object (load)
  bool keepObject_ = false;
};

/// Process-wide counters behind codegen::kernelCacheStats().
struct KernelCacheCounters {
  std::atomic<int64_t> hits{0}, misses{0}, bad_entries{0}, stores{0}, store_failures{0}, mlir_lowerings{0},
      llvm_compiles{0};
};
KernelCacheCounters &kernelCacheCounters();

/// "triple|cpu|sorted features" of the host, as the JIT targets it.
std::string hostTargetDescription();

/// SHA-256 (hex) of: the cache format, KILN_VERSION, LLVM_VERSION_STRING,
/// the host target, `lowering` (loweringDescription) and the kernel module's
/// IR as printed before lowering (generic-free, no locations).
std::string kernelCacheKey(mlir::ModuleOp kernels, const std::string &lowering);

/// `<dir>/<key>.o`.
std::string kernelCachePath(const std::string &dir, const std::string &key);

enum class CacheRead { Missing, Corrupt, Ok };
/// Reads an entry and checks its trailer (size, SHA-256 of key + object,
/// magic); `*object` gets the bare object on Ok, `*why` says why on Corrupt.
CacheRead readCachedObject(const std::string &path, const std::string &key, std::string *object, std::string *why);

/// Writes `library`'s object to `path` atomically: dumped to a unique temp
/// file in the same directory (created if needed), trailer appended, renamed
/// over `path`. False and `*error` on failure (the temp file is removed).
bool storeCachedObject(const KernelLibrary &library, const std::string &path, const std::string &key,
                       std::string *error);

/// Builds the launch list of `func` (after the pipeline: only kiln.fusion,
/// kiln.matmul, kiln.transpose/broadcast/reshape, func.return). Kernels come
/// from `library`, which the executable keeps alive. Null and `*error` for an
/// op it cannot run.
std::shared_ptr<runtime::LaunchExecutable>
buildExecutable(mlir::func::FuncOp func, std::shared_ptr<const KernelLibrary> library, std::string *error);

/// Which compiled function runs a kiln.fusion, and the runtime scalars
/// appended to its operands (shape-generic kernels); null `fn` with `*error`
/// set when there is none.
struct KernelBinding {
  runtime::PackedKernel fn = nullptr;
  std::vector<std::pair<DType, double>> scalars;
  /// The operand strides the kernel was compiled for (kDynamic: any); empty:
  /// operandStrides(fusion).
  std::vector<std::vector<int64_t>> strides;
  /// The kernel was emitted row-split (emitKernel + isRowSplittable).
  bool splitRows = false;
  /// The kernel may run with results over operands (inPlacePairs).
  std::vector<runtime::InPlace> inPlace;
};
using KernelBinder = std::function<KernelBinding(kiln::ir::FusionOp, std::string *error)>;

/// buildExecutable with kernels chosen by `bind` instead of by name.
std::shared_ptr<runtime::LaunchExecutable> buildExecutable(mlir::func::FuncOp func, const KernelBinder &bind,
                                                           std::shared_ptr<const void> keepAlive,
                                                           std::string *error);

} // namespace kiln::codegen::cpu
