// kiln/codegen/Compiler.h - the compiler entry point used by kiln::compile.
//
// Takes the plain Graph from tracing, builds the `kiln` dialect module, runs
// the pass pipeline (passes/Pipeline.h), lowers every kiln.fusion to LLVM and
// JITs them in one ExecutionEngine, and returns runtime Executables for the
// forward and (for joint graphs) the backward function.
//
// No MLIR type appears here; this header is safe to include from frontend/.
// Never throws: errors come back as a message (the frontend turns them into
// kiln::Error).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/Graph.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/Executable.h"

/// Kiln's version. Part of the kernel cache key: bump it (or the cache format
/// in KernelCache.cpp) when generated code changes in ways the key does
/// not see.
#define KILN_VERSION "0.1.0"

namespace kiln::codegen {

inline constexpr const char *kKilnVersion = KILN_VERSION;

struct CompileOptions {
  /// If non-empty, the IR after each named pipeline stage is written here
  /// (KILN_DUMP_IR). The kernel cache is then not read (every stage runs, so
  /// every dump is written); it is still written.
  std::string dump_ir_dir;
  /// On-disk kernel cache (compiled objects keyed by the kernel IR, Kiln and
  /// LLVM versions and the host target). Unset: $KILN_CACHE_DIR if set (empty
  /// disables), else $XDG_CACHE_HOME/kiln/kernels or ~/.cache/kiln/kernels.
  /// Set to "": no cache. KILN_DISABLE_CACHE=1 disables it in every case.
  std::optional<std::string> kernel_cache_dir;
  /// Checkpoint rematerialization (kiln-remat, passes/DESIGN.md): run it,
  /// with this memory budget in [0, 1] (1 = min-cut over cheap ops, 0 =
  /// recompute everything from the inputs).
  bool remat = true;
  double memory_budget = 1.0;
  /// Mixed precision: BFloat16 or Float16 runs the kiln-autocast pass with
  /// that type (GEMMs in it, reductions/exp/log in f32; passes/DESIGN.md).
  /// Float32 (default): off. Any other dtype fails the compile.
  DType autocast = DType::Float32;
  /// The device the graph runs on: its compile target is findTarget(type)
  /// (kiln/codegen/Target.h); none registered fails the compile.
  Device device = kCPU;
  /// Passes of the caller's own joining the pipeline at a named stage
  /// (passes::CustomPassSpec; kiln::CustomPass in kiln/compile.h).
  struct CustomPass {
    std::string stage;
    bool after = true;
    std::string pipeline;
  };
  std::vector<CustomPass> custom_passes;
};

/// One fusion group, for reports (kiln::explain and logs).
struct FusionInfo {
  std::string name;       ///< kernel symbol
  int num_ops = 0;        ///< ops inside the kiln.fusion region
  int64_t bytes_read = 0; ///< bytes of its operands
  int64_t bytes_written = 0;
};

/// One launch of a compiled forward or backward, in launch order, for the
/// performance report (kiln/codegen/PerfModel.h, kiln::explain). Bytes are
/// the launch's operand and result tensor sizes (each once); FLOPs follow
/// kiln/passes/FlopCount.h (GEMMs 2*M*N*K, elementwise one per element).
struct LaunchInfo {
  enum class Kind { Kernel, Gemm, Conv, Pool, Copy }; ///< Copy: a strided view made contiguous by the runtime
  Kind kind = Kind::Kernel;
  std::string name;   ///< fusion kernel name; "gemm MxNxK" (batch "gemm BxMxNxK"); "<fusion> (gemm+bias)"; op name; "copy"
  std::string symbol; ///< Kernel: its function in the kernel library (fusions may share one)
  bool backward = false;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t flops = 0;
  DType dtype = DType::Float32; ///< a GEMM's element type (its peak rate)
  /// The target's launch shape (KernelLibrary::launchFacts; CUDA only):
  /// kernel kind, threads per block (0: none), blocks (-1: run-time),
  /// dynamic shared bytes.
  std::string kernel_kind;
  int64_t block_threads = 0;
  int64_t grid_blocks = -1;
  int64_t dynamic_shared_bytes = 0;
};

/// One device translation unit of a graph's kernels (CUDA: prelude + a few
/// kernels, KernelLibrary::sourceUnits), kept for the ptxas report.
struct KernelSourceUnit {
  std::string source;
  std::vector<std::string> kernel_names;
};

struct CompiledGraph {
  /// forward: (primal inputs...) -> (forward outputs..., saved values...)
  std::shared_ptr<runtime::Executable> forward;
  /// backward: (primal inputs..., saved values..., tangents...) -> (grads...)
  /// grads are for the primal inputs that had a gradient output in the
  /// Graph, in Graph::outputs order. Null for forward-only graphs.
  std::shared_ptr<runtime::Executable> backward;
  int num_forward_outputs = 0;
  int num_saved = 0;
  /// Bytes of the saved values (forward outputs among them not counted:
  /// forward returns them anyway); what forward hands to backward.
  int64_t saved_bytes = 0;
  /// Forward ops that backward recomputes instead of loading: op name
  /// (e.g. "kiln.mul") and count, and their FLOPs (matmul 2*M*N*K, one per
  /// element for elementwise ops and reductions, 0 for views/constants).
  std::vector<std::pair<std::string, int64_t>> recomputed_ops;
  int64_t recompute_flops = 0;
  /// kiln-remat's estimates under a memory budget in (0, 1) (bytes; -1:
  /// none): the chosen cut's peak activation memory, the target (budget x
  /// the budget-1 cut's), and the budget-1 cut's.
  int64_t remat_peak_bytes = -1, remat_target_bytes = -1, remat_fastest_peak_bytes = -1;
  std::vector<FusionInfo> fusions;
  /// Every launch of forward then backward (LaunchInfo), and the device
  /// translation units of the kernels (empty on the CPU target).
  std::vector<LaunchInfo> launches;
  std::vector<KernelSourceUnit> kernel_sources;
  /// Distinct kernel functions compiled for `fusions` (fusions whose kernels
  /// are identical up to their name share one).
  int num_distinct_kernels = 0;
  /// Fusions the target folded into their GEMM's epilogue
  /// (Target::gemmEpilogueKernel): "<fusion>: bias+gelu", in launch order.
  std::vector<std::string> gemm_epilogues;

  /// kiln-autocast's report (empty/zero when CompileOptions::autocast is
  /// off): its dtype ("bf16"/"f16"), the kiln.convert ops it added (net,
  /// after removing redundant ones) and removed, and the ops that compute in
  /// the lower type, by kiln op name ("matmul", "transpose", ...), sorted.
  std::string autocast;
  int autocast_casts = 0;
  int autocast_casts_removed = 0;
  std::vector<std::pair<std::string, int>> autocast_ops;

  /// The kernels were loaded from the on-disk cache: no MLIR lowering and no
  /// LLVM optimization/codegen ran for them.
  bool kernel_cache_hit = false;
  /// The cache key (64 hex digits); empty when the cache is off or the graph
  /// has no kernels.
  std::string kernel_cache_key;
  /// Wall time of compileGraph and its phases, in seconds: kiln module,
  /// pipeline and kernel emission (pipeline); kernels -> LLVM dialect (mlir);
  /// LLVM IR optimization + machine code + linking (llvm, 0 on a hit);
  /// reading and linking a cached object (cache_load); executables and the
  /// rest (the remainder of compile).
  double compile_seconds = 0.0;
  double pipeline_seconds = 0.0;
  double mlir_lowering_seconds = 0.0;
  double llvm_seconds = 0.0;
  double cache_load_seconds = 0.0;
  /// Built by compileGraphDynamic/instantiateGraphDynamic: the kernels are
  /// shape-generic (`?` dims) and shared by every size of the dynamic dim.
  bool dynamic = false;
  int num_generic_kernels = 0; ///< distinct generic kernels in the library
};

/// Process-wide kernel cache counters (all compileGraph calls so far).
struct KernelCacheStats {
  int64_t hits = 0;           ///< kernel modules loaded from the cache
  int64_t misses = 0;         ///< lookups that found no usable entry
  int64_t bad_entries = 0;    ///< entries present but corrupt or not loadable
  int64_t stores = 0;         ///< objects written to the cache
  int64_t store_failures = 0; ///< objects that could not be written
  int64_t mlir_lowerings = 0; ///< kernel modules lowered to the LLVM dialect
  int64_t llvm_compiles = 0;  ///< kernel modules compiled by LLVM (ExecutionEngine)
};
KernelCacheStats kernelCacheStats();

/// The cache directory compileGraph would use with `options` (after the
/// environment); empty when the cache is disabled.
std::string resolveKernelCacheDir(const CompileOptions &options);

/// True when a compile target is registered for devices of `type`
/// (findTarget, kiln/codegen/Target.h).
bool hasCompileTarget(DeviceType type);

/// Compiles `graph` with static shapes. Returns false and fills `error` on failure.
bool compileGraph(const ir::Graph &graph, const CompileOptions &options,
                  CompiledGraph *out, std::string *error);

/// The shape-generic kernels of one dynamic graph (opaque; executables keep
/// it alive).
struct DynamicKernels;

/// Automatic dynamic shapes (kiln/ir/DynamicShapes.h). `graph` and
/// `reference` are the same program at two sizes of one dimension (e.g.
/// ir::instantiate of one SymbolicGraph at two sizes). Both go through the
/// pipeline; each kernel of `graph` is compared with the same kernel of
/// `reference` and emitted once with `?` for every dim that differs and a
/// runtime scalar argument for every float constant that differs (e.g.
/// 1/N), then all are JIT-compiled in one module (through the kernel cache).
/// `*kernels` receives them for instantiateGraphDynamic. Fails (with the
/// reason in `*error`) when the two sizes give different kernels.
bool compileGraphDynamic(const ir::Graph &graph, const ir::Graph &reference, const CompileOptions &options,
                         CompiledGraph *out, std::shared_ptr<const DynamicKernels> *kernels, std::string *error);

/// Executables for `graph` at another size, from `kernels` alone: runs the
/// pipeline (no kernel lowering, no LLVM) and binds every kiln.fusion to its
/// generic kernel with that size's scalars. Fails when a kernel has no
/// generic version (the caller then compiles `graph` statically).
bool instantiateGraphDynamic(const ir::Graph &graph, const std::shared_ptr<const DynamicKernels> &kernels,
                             CompiledGraph *out, std::string *error);

}  // namespace kiln::codegen
