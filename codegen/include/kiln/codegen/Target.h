// kiln/codegen/Target.h - what a code generation target provides to the
// compiler (Compiler.cpp), and the registry of targets by device type.
//
// A target turns each kiln.fusion of the pipeline's output into a kernel
// function (its own dialects: linalg for the CPU), compiles the module of a
// graph's kernels into a KernelLibrary (or loads a cached object into one),
// and says how fast its device computes and moves bytes (kiln-remat's time
// model). Everything else — the stage table, the one dedup of identical
// kernels, the kernel cache, shape generalization, the executables — is
// target-neutral and lives in codegen/ outside any target's folder.
//
//   std::shared_ptr<const Target> t = findTarget(DeviceType::CPU);  // cpu/CpuTarget.cpp
//   t->emitKernel(fusion, kernels, "kernel");
//
// Registering a target (a program or a test, before kiln::compile runs):
//   codegen::register_target(DeviceType::PrivateUse1, codegen::cpuTarget());
// serves a host-accessible PrivateUse1 device with the CPU's kernels.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include "kiln/ir/KilnOps.h"
#include "kiln/runtime/DType.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/KernelHandle.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace kiln::codegen {

struct KernelGeneralization; // GeneralizeKernel.h

/// The compiled code of one graph's kernel module; executables keep it alive.
class KernelLibrary {
public:
  virtual ~KernelLibrary() = default;
  /// The packed entry point of kernel `name`, or null and `*error`.
  virtual runtime::PackedKernel lookup(const std::string &name, std::string *error) const = 0;
  /// Writes the object code the kernel cache stores (a library compiled with
  /// keepObject). False and `*error` when there is none.
  virtual bool dumpObject(const std::string &path, std::string *error) const = 0;
  /// The handle an executable launches for kernel `name`. `scalars`: the
  /// run-time scalars of a shape-generic kernel (dtype, value, in the
  /// kernel's order), only when bindsScalars() (else they are passed as
  /// rank-0 constant operands and `scalars` is empty); `splitRows`: the
  /// kernel was emitted row-split (the CPU's OpenMP split). Default: the CPU
  /// handle of lookup(name). A null handle and `*error` when there is none.
  virtual runtime::KernelHandle handle(const std::string &name, const std::vector<std::pair<DType, double>> &scalars,
                                       bool splitRows, std::string *error) const {
    (void)scalars;
    return runtime::KernelHandle::cpu(lookup(name, error), splitRows);
  }
  /// True when handle() takes the run-time scalars (the CUDA target passes
  /// them by value in the launch); false: they are constant operands (the
  /// CPU's memref ABI).
  virtual bool bindsScalars() const { return false; }
  /// The launch shape of kernel `symbol` for performance reports: its kind
  /// ("pointwise", ...), threads per block, blocks (-1 when set by run-time
  /// sizes) and dynamic shared bytes. False (the default): the target has
  /// no such shape (the CPU's OpenMP loops).
  struct LaunchFacts {
    std::string kind;
    int64_t block_threads = 0;
    int64_t grid_blocks = -1;
    int64_t dynamic_shared_bytes = 0;
  };
  virtual bool launchFacts(const std::string &symbol, LaunchFacts *out) const {
    (void)symbol;
    (void)out;
    return false;
  }
  /// The device translation units (source, kernel names) the library
  /// compiled, for the ptxas report; none by default.
  virtual std::vector<std::pair<std::string, std::vector<std::string>>> sourceUnits() const { return {}; }
};

/// A device's speed, for kiln-remat's step-time model (its pass options
/// `bytes-per-second` and `flops-per-second`): a kernel byte read or written
/// costs flops_per_second / bytes_per_second matmul FLOPs.
struct CostModel {
  double bytes_per_second = 0.0; ///< fused kernels' memory traffic
  double flops_per_second = 0.0; ///< GEMM throughput
};

/// Where the time of compileKernels went, in seconds.
struct KernelCompileTimes {
  double lowering_seconds = 0.0; ///< kernel dialects -> the target's IR (MLIR)
  double codegen_seconds = 0.0;  ///< the target's IR -> machine code (LLVM)
};

/// A GEMM epilogue a target may fold into its GEMM (codegen/GemmEpilogue.h
/// matches them): what is applied to t = a x b + bias[n] before the store
/// (forward), or to the product g = a x b of a backward GEMM.
enum class GemmEpilogueKind {
  Bias,        ///< t (cuBLASLt: CUBLASLT_EPILOGUE_BIAS)
  BiasRelu,    ///< relu(t) (CUBLASLT_EPILOGUE_RELU_BIAS)
  BiasGelu,    ///< gelu(t, "tanh") (CUBLASLT_EPILOGUE_GELU_BIAS)
  BiasGeluAux, ///< gelu(t, "tanh") and t itself, saved for backward (CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
  Dgelu,       ///< g * gelu'(aux) with aux the saved t (CUBLASLT_EPILOGUE_DGELU)
  DgeluBgrad,  ///< the same and its column sum, the bias gradient (CUBLASLT_EPILOGUE_DGELU_BGRAD)
};

class Target {
public:
  virtual ~Target() = default;
  /// Short name, for errors and dumps ("cpu").
  virtual std::string name() const = 0;
  /// Adds the dialects, interfaces and translations the target's kernels
  /// need (on top of the kiln dialects).
  virtual void registerDialects(mlir::DialectRegistry &registry) const = 0;
  /// Appends the kernel of `fusion` to `kernels` as `func.func @<name>`
  /// (default: fusion.getKernel()). Errors are MLIR diagnostics on the op.
  virtual mlir::LogicalResult emitKernel(ir::FusionOp fusion, mlir::ModuleOp kernels,
                                         llvm::StringRef name = {}) const = 0;
  /// The same, shape-generic (`?` dims and scalar arguments of `generic`).
  virtual mlir::LogicalResult emitGenericKernel(ir::FusionOp fusion, const KernelGeneralization &generic,
                                                llvm::StringRef name, mlir::ModuleOp kernels) const = 0;
  /// What the kernel cache key holds for this target besides the kernels'
  /// IR: the target's name, machine and the whole lowering (a changed
  /// lowering must miss the cache).
  virtual std::string cacheKeyPrefix(mlir::MLIRContext *context) const = 0;
  /// Compiles a module of emitted kernels (consumed: lowered in place) into
  /// a library that resolves every name in `names`. `dump_dir` non-empty:
  /// the lowering's IR is written there. `keepObject`: dumpObject works.
  virtual std::shared_ptr<KernelLibrary> compileKernels(mlir::ModuleOp kernels, const std::vector<std::string> &names,
                                                        const std::string &dump_dir, bool keepObject,
                                                        KernelCompileTimes *times, std::string *error) const = 0;
  /// A library from cached object code (dumpObject's), or null and `*error`.
  virtual std::shared_ptr<KernelLibrary> loadKernels(const std::string &object, const std::vector<std::string> &names,
                                                     std::string *error) const = 0;
  virtual CostModel costModel() const = 0;
  /// The launch of a float32 GEMM with `kind` folded into its store, for
  /// a product [M, N] with N = `n`: operands a [M, K], b [K, N] (views with a unit stride
  /// in one of the two dims), then bias [N] contiguous (Bias*, BiasGeluAux)
  /// or aux [M, N] contiguous (Dgelu, DgeluBgrad); results [M, N], then aux
  /// [M, N] (BiasGeluAux) or the bias gradient [N] (DgeluBgrad). A null
  /// handle (the default) when the target does not fold `kind` at this
  /// shape: the fusion then runs as its own kernel after the GEMM.
  virtual runtime::KernelHandle gemmEpilogueKernel(GemmEpilogueKind kind, int64_t n) const {
    (void)kind, (void)n;
    return {};
  }
};

/// The CPU target (cpu/CpuTarget.cpp): linalg kernels, LLVM, ORC JIT.
std::shared_ptr<const Target> cpuTarget();

/// The CUDA target (cuda/CudaTarget.cpp): CUDA C kernels, NVRTC on a GPU,
/// the host compiler on the simulator. Not registered by default: the
/// frontend registers it for DeviceType::CUDA (registerCudaTarget,
/// kiln/codegen/CudaTarget.h).
std::shared_ptr<const Target> cudaTarget();

/// The target that compiles graphs for devices of `type` (the CPU's is
/// registered from the start), or null.
std::shared_ptr<const Target> findTarget(DeviceType type);

/// Makes `target` serve devices of `type` (replacing any before). The CPU
/// target may serve a host-accessible PrivateUse1 device.
void register_target(DeviceType type, std::shared_ptr<const Target> target);

} // namespace kiln::codegen
