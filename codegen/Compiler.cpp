// compileGraph: Graph -> kiln module -> pipeline -> kernels (the device's
// Target) -> Executables, as one table of named stages per kind of compile
// (static shapes; shape-generic kernels), sharing one dedup step.
#include "kiln/codegen/Compiler.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <vector>

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include "BuildExecutable.h"
#include "GeneralizeKernel.h"
#include "KernelAbi.h"
#include "KernelCache.h"
#include "kiln/codegen/Target.h"
#include "kiln/ir/GraphBuilder.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/FlopCount.h"
#include "kiln/passes/Pipeline.h"

namespace kiln::codegen {

using namespace mlir;

namespace {

/// Size and traffic of one kiln.fusion, for reports.
FusionInfo describeFusion(ir::FusionOp fusion) {
  FusionInfo info;
  info.name = fusion.getKernel().str();
  info.num_ops = static_cast<int>(fusion.getBodyBlock().getOperations().size()) - 1; // not yield
  for (Value v : fusion.getInputs())
    info.bytes_read += passes::valueBytes(v);
  for (Value v : fusion.getResults())
    info.bytes_written += passes::valueBytes(v);
  return info;
}

int64_t intAttr(func::FuncOp func, StringRef name, int64_t fallback) {
  if (auto attr = func->getAttrOfType<IntegerAttr>(name))
    return attr.getInt();
  return fallback;
}

/// The `kiln.autocast` attribute kiln-autocast leaves on the module.
void readAutocastReport(ModuleOp module, CompiledGraph *result) {
  auto report = module->getAttrOfType<DictionaryAttr>("kiln.autocast");
  if (!report)
    return;
  if (auto dtype = report.getAs<StringAttr>("dtype"))
    result->autocast = dtype.str();
  if (auto n = report.getAs<IntegerAttr>("casts_inserted"))
    result->autocast_casts = static_cast<int>(n.getInt());
  if (auto n = report.getAs<IntegerAttr>("casts_removed"))
    result->autocast_casts_removed = static_cast<int>(n.getInt());
  if (auto ops = report.getAs<DictionaryAttr>("low_precision_ops"))
    for (NamedAttribute op : ops)
      if (auto n = dyn_cast<IntegerAttr>(op.getValue()))
        result->autocast_ops.emplace_back(op.getName().str(), static_cast<int>(n.getInt()));
}

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// KILN_LOG contains "cache" (or "all"): one line per kernel cache event.
bool logCache() {
  static const bool on = [] {
    const char *log = std::getenv("KILN_LOG");
    if (!log)
      return false;
    std::string s(log);
    return s.find("cache") != std::string::npos || s.find("all") != std::string::npos;
  }();
  return on;
}

/// What kiln-partition reports about rematerialization (kiln-remat).
void readRematReport(func::FuncOp forward, func::FuncOp backward, CompiledGraph *result) {
  result->saved_bytes = intAttr(forward, "kiln.saved_bytes", 0);
  if (backward) {
    result->recompute_flops = intAttr(backward, "kiln.recompute_flops", 0);
    if (auto peak = backward->getAttrOfType<DenseI64ArrayAttr>("kiln.remat_peak"); peak && peak.size() == 3) {
      result->remat_peak_bytes = peak[0];
      result->remat_target_bytes = peak[1];
      result->remat_fastest_peak_bytes = peak[2];
    }
    if (auto recomputed = backward->getAttrOfType<DictionaryAttr>("kiln.recomputed"))
      for (NamedAttribute entry : recomputed)
        if (auto count = dyn_cast<IntegerAttr>(entry.getValue()))
          result->recomputed_ops.emplace_back(entry.getName().str(), count.getInt());
  }
}

/// The pipeline's options for `options`: remat, memory budget, autocast,
/// the target's cost model (kiln-remat's time model) and custom passes.
bool pipelineOptions(const CompileOptions &options, const Target &target, const std::string &dump_dir,
                     passes::PipelineOptions *pipeline, std::string *error) {
  pipeline->dump_ir_dir = dump_dir;
  pipeline->remat = options.remat;
  pipeline->memory_budget = options.memory_budget;
  const CostModel cost = target.costModel();
  pipeline->bytes_per_second = cost.bytes_per_second;
  pipeline->flops_per_second = cost.flops_per_second;
  for (const CompileOptions::CustomPass &custom : options.custom_passes)
    pipeline->custom_passes.push_back({custom.stage, custom.after, custom.pipeline});
  if (options.autocast != DType::Float32) {
    if (options.autocast != DType::BFloat16 && options.autocast != DType::Float16) {
      *error = std::string("autocast must be float32 (off), bfloat16 or float16, got ") + dtype_name(options.autocast);
      return false;
    }
    pipeline->autocast = options.autocast == DType::BFloat16 ? "bf16" : "f16";
  }
  return true;
}

/// Kernels -> KernelLibrary through the on-disk cache: a verified entry is
/// loaded by the target as is (no lowering, no codegen); otherwise the
/// target compiles the kernels, and the object is stored (overwriting a bad
/// entry). Cache problems never fail the compile; they only cost the compile.
std::shared_ptr<KernelLibrary> buildLibrary(const Target &target, ModuleOp kernels, const CompileOptions &options,
                                            CompiledGraph *result, std::string *error) {
  std::vector<std::string> names;
  for (auto func : kernels.getOps<func::FuncOp>())
    names.push_back(func.getSymName().str());
  const std::string dir = names.empty() ? "" : resolveKernelCacheDir(options);
  KernelCacheCounters &counters = kernelCacheCounters();
  std::string path;
  if (!dir.empty()) {
    result->kernel_cache_key = kernelCacheKey(kernels, target.cacheKeyPrefix(kernels.getContext()));
    path = kernelCachePath(dir, result->kernel_cache_key);
  }

  if (!path.empty() && options.dump_ir_dir.empty()) {
    auto start = Clock::now();
    std::string object, why;
    CacheRead read = readCachedObject(path, result->kernel_cache_key, &object, &why);
    std::shared_ptr<KernelLibrary> library;
    if (read == CacheRead::Ok) {
      library = target.loadKernels(object, names, &why);
      if (!library)
        read = CacheRead::Corrupt;
    }
    result->cache_load_seconds = secondsSince(start);
    if (library) {
      counters.hits++;
      result->kernel_cache_hit = true;
      if (logCache())
        llvm::errs() << "kiln: kernel cache hit " << path << " (" << names.size() << " kernels, "
                     << llvm::format("%.1f", result->cache_load_seconds * 1e3) << " ms)\n";
      return library;
    }
    counters.misses++;
    if (read == CacheRead::Corrupt) {
      counters.bad_entries++;
      if (logCache())
        llvm::errs() << "kiln: kernel cache: bad entry, recompiling: " << why << "\n";
    }
  }

  KernelCompileTimes times;
  std::shared_ptr<KernelLibrary> library =
      target.compileKernels(kernels, names, options.dump_ir_dir, /*keepObject=*/!path.empty(), &times, error);
  result->mlir_lowering_seconds = times.lowering_seconds;
  result->llvm_seconds = times.codegen_seconds;
  if (!library)
    return nullptr;
  if (!path.empty()) {
    std::string why;
    if (storeCachedObject(*library, path, result->kernel_cache_key, &why)) {
      counters.stores++;
      if (logCache())
        llvm::errs() << "kiln: kernel cache store " << path << " (lowering "
                     << llvm::format("%.1f", result->mlir_lowering_seconds * 1e3) << " ms, LLVM "
                     << llvm::format("%.1f", result->llvm_seconds * 1e3) << " ms)\n";
    } else {
      counters.store_failures++;
      if (logCache())
        llvm::errs() << "kiln: kernel cache: cannot store: " << why << "\n";
    }
  }
  return library;
}

/// An MLIRContext with the kiln dialect and the target's dialects loaded,
/// whose error diagnostics (verifier, passes, lowering) are collected into
/// `diagnostics` for the compile error.
struct CompilerContext {
  DialectRegistry registry;
  MLIRContext context;
  std::string diagnostics;
  ScopedDiagnosticHandler handler;

  static DialectRegistry makeRegistry(const Target &target) {
    DialectRegistry r;
    ir::registerKilnDialect(r);
    target.registerDialects(r);
    return r;
  }
  explicit CompilerContext(const Target &target)
      : registry(makeRegistry(target)), context(registry, MLIRContext::Threading::DISABLED),
        handler(&context, [this](Diagnostic &diag) {
          if (diag.getSeverity() != DiagnosticSeverity::Error)
            return success();
          llvm::raw_string_ostream os(diagnostics);
          os << "\n  " << diag.getLocation() << ": " << diag.str();
          return success();
        }) {
    ir::loadKilnDialects(context);
    context.loadAllAvailableDialects();
  }
};

/// One graph after the pipeline: its module and its kernels in order
/// (forward, then backward).
struct PipelineResult {
  OwningOpRef<ModuleOp> module;
  func::FuncOp forward, backward;
  std::vector<ir::FusionOp> fusions;
};

/// buildModule + passes::runPipeline, then the fusions of the result.
bool runPipelineOnGraph(MLIRContext &context, const ir::Graph &graph, const CompileOptions &options,
                        const Target &target, const std::string &dump_dir, PipelineResult *out,
                        std::string *message) {
  out->module = ir::buildModule(context, graph, message);
  if (!out->module)
    return false;
  passes::PipelineOptions pipeline;
  if (!pipelineOptions(options, target, dump_dir, &pipeline, message))
    return false;
  if (failed(passes::runPipeline(*out->module, pipeline, message)))
    return false;
  out->forward = out->module->lookupSymbol<func::FuncOp>("forward");
  out->backward = out->module->lookupSymbol<func::FuncOp>("backward");
  if (!out->forward) {
    *message = "no func @forward after the pipeline";
    return false;
  }
  for (func::FuncOp func : {out->forward, out->backward})
    if (func)
      func.walk([&](ir::FusionOp fusion) { out->fusions.push_back(fusion); });
  return true;
}

/// THE dedup step: one kernel function per distinct body. Fusions whose
/// kernels print identically when named `@kernel` (the same block repeated
/// in a model, the same epilogue in every layer) share one function, so
/// each distinct kernel is lowered and compiled once.
class KernelDedup {
public:
  /// Emits one kernel into `into` under `name`.
  using Emit = llvm::function_ref<LogicalResult(ModuleOp into, StringRef name)>;

  KernelDedup(MLIRContext &context, std::map<std::string, std::string> known)
      : scratch_(ModuleOp::create(UnknownLoc::get(&context))), symbolOfText_(std::move(known)) {}

  /// The symbol of the kernel that `emit` makes. A new body is emitted into
  /// `kernels` as `newSymbol` (null `kernels`: a new body fails with
  /// `*message`, for instantiating shape-generic kernels).
  FailureOr<std::string> symbolFor(Emit emit, ModuleOp kernels, const std::string &newSymbol, std::string *message) {
    if (failed(emit(*scratch_, "kernel")))
      return failure();
    std::string text;
    {
      llvm::raw_string_ostream os(text);
      for (Operation &op : scratch_->getBody()->getOperations())
        op.print(os);
    }
    scratch_->getBody()->clear();
    auto found = symbolOfText_.find(text);
    if (found != symbolOfText_.end())
      return found->second;
    if (!kernels) {
      *message = "kernel " + newSymbol + " has no shape-generic version for this size";
      return failure();
    }
    if (failed(emit(kernels, newSymbol)))
      return failure();
    return symbolOfText_.emplace(text, newSymbol).first->second;
  }
  const std::map<std::string, std::string> &symbols() const { return symbolOfText_; }

private:
  OwningOpRef<ModuleOp> scratch_;
  std::map<std::string, std::string> symbolOfText_; // kernel IR named @kernel -> symbol
};

/// The shared reports of a compiled graph: forward outputs, saved values,
/// kiln-remat's and kiln-autocast's attributes.
void readReports(const PipelineResult &self, const ir::Graph &graph, CompiledGraph *result) {
  result->num_forward_outputs =
      static_cast<int>(intAttr(self.forward, "kiln.num_forward_outputs", graph.num_forward_outputs));
  result->num_saved = static_cast<int>(intAttr(self.forward, "kiln.num_saved", 0));
  readRematReport(self.forward, self.backward, result);
  readAutocastReport(*self.module, result);
}

/// The forward and backward executables of `self`, kernels chosen by `bind`.
bool buildExecutables(const PipelineResult &self, const KernelBinder &bind, std::shared_ptr<const void> keepAlive,
                      Device device, const Target &target, CompiledGraph *result, std::string *message) {
  result->forward = buildExecutable(self.forward, bind, keepAlive, device, message, &target, &result->gemm_epilogues,
                                    &result->launches);
  if (!result->forward)
    return false;
  if (self.backward) {
    result->backward = buildExecutable(self.backward, bind, keepAlive, device, message, &target,
                                       &result->gemm_epilogues, &result->launches);
    if (!result->backward)
      return false;
  }
  return true;
}

/// The performance report's target facts: each kernel launch's symbol (a
/// shape-generic kernel's is `symbolOf` its fusion name, when given), its
/// launch shape from `library`, and the library's device sources.
void addLaunchFacts(const KernelLibrary &library, CompiledGraph *result,
                    const std::function<std::string(const std::string &)> &symbolOf = {}) {
  for (LaunchInfo &launch : result->launches) {
    if (launch.kind != LaunchInfo::Kind::Kernel)
      continue;
    if (symbolOf)
      launch.symbol = symbolOf(launch.name);
    KernelLibrary::LaunchFacts facts;
    if (!library.launchFacts(launch.symbol, &facts))
      continue;
    launch.kernel_kind = facts.kind;
    launch.block_threads = facts.block_threads;
    launch.grid_blocks = facts.grid_blocks;
    launch.dynamic_shared_bytes = facts.dynamic_shared_bytes;
  }
  for (auto &[source, names] : library.sourceUnits())
    result->kernel_sources.push_back(KernelSourceUnit{std::move(source), std::move(names)});
}

/// The target of `options.device`, or null and `*error`.
std::shared_ptr<const Target> targetFor(const CompileOptions &options, std::string *error) {
  std::shared_ptr<const Target> target = findTarget(options.device.type);
  if (!target)
    *error = "compile: no compile target for device " + options.device.str() +
             " (codegen::register_target registers one; the CPU's is built in)";
  return target;
}

// ---- static shapes ----------------------------------------------------------

/// What the stages of one static compile share.
struct StaticCompile {
  const ir::Graph &graph;
  const CompileOptions &options;
  const Target &target;
  CompilerContext &cc;
  PipelineResult self;
  OwningOpRef<ModuleOp> kernels;
  std::map<std::string, std::string> symbolOf; // fusion kernel name -> symbol
  std::shared_ptr<KernelLibrary> library;
  CompiledGraph result;
};

bool staticPipeline(StaticCompile &c, std::string *message) {
  return runPipelineOnGraph(c.cc.context, c.graph, c.options, c.target, c.options.dump_ir_dir, &c.self, message);
}

/// One kernel module for the whole graph (the JIT cost is paid once), one
/// function per distinct kernel.
bool staticEmitKernels(StaticCompile &c, std::string *message) {
  c.kernels = ModuleOp::create(UnknownLoc::get(&c.cc.context));
  KernelDedup dedup(c.cc.context, {});
  for (ir::FusionOp fusion : c.self.fusions) {
    const std::string name = fusion.getKernel().str();
    if (c.symbolOf.count(name)) {
      fusion.emitOpError("duplicate kernel name ") << fusion.getKernel();
      *message = "a kiln.fusion cannot be lowered";
      return false;
    }
    c.result.fusions.push_back(describeFusion(fusion));
    auto emit = [&](ModuleOp into, StringRef symbol) { return c.target.emitKernel(fusion, into, symbol); };
    FailureOr<std::string> symbol = dedup.symbolFor(emit, *c.kernels, name, message);
    if (failed(symbol)) {
      *message = "a kiln.fusion cannot be lowered";
      return false;
    }
    c.symbolOf[name] = *symbol;
  }
  c.result.num_distinct_kernels = static_cast<int>(dedup.symbols().size());
  return true;
}

bool staticCompileKernels(StaticCompile &c, std::string *message) {
  c.library = buildLibrary(c.target, *c.kernels, c.options, &c.result, message);
  return c.library != nullptr;
}

bool staticExecutables(StaticCompile &c, std::string *message) {
  KernelBinder bind = [&](ir::FusionOp fusion, std::string *why) {
    auto it = c.symbolOf.find(fusion.getKernel().str());
    if (it == c.symbolOf.end()) {
      *why = "no kernel emitted for " + fusion.getKernel().str();
      return KernelBinding{};
    }
    return KernelBinding{c.library->handle(it->second, {}, isRowSplittable(fusion), why), {}, {},
                         inPlacePairs(fusion), it->second};
  };
  if (!buildExecutables(c.self, bind, c.library, c.options.device, c.target, &c.result, message))
    return false;
  addLaunchFacts(*c.library, &c.result);
  readReports(c.self, c.graph, &c.result);
  return true;
}

template <typename State> struct Stage {
  const char *name;
  bool (*run)(State &state, std::string *message);
};

/// THE static compile: its stages in order (errors name the stage).
const Stage<StaticCompile> kStaticStages[] = {
    {"pipeline", staticPipeline},
    {"emitting kernels", staticEmitKernels},
    {"compiling kernels", staticCompileKernels},
    {"executable", staticExecutables},
};

// ---- shape-generic kernels (automatic dynamic shapes) ----------------------

} // namespace

/// The shape-generic kernels of a dynamic graph and how to find them.
struct DynamicKernels {
  ir::Graph reference;                         ///< the graph at the reference size
  std::shared_ptr<KernelLibrary> library;      ///< owns the compiled code
  std::map<std::string, std::string> symbolOf; ///< generic kernel IR -> symbol in `library`
  CompileOptions options;
};

namespace {

/// What the stages of one generic compile (or instantiation) share.
struct GenericCompile {
  const ir::Graph &graph, &reference;
  const CompileOptions &options;
  const Target &target;
  CompilerContext &cc;
  std::shared_ptr<const DynamicKernels> existing; ///< instantiate: only look kernels up
  PipelineResult self, ref;
  std::vector<KernelGeneralization> generic;      ///< per fusion of `self`
  std::shared_ptr<DynamicKernels> dynamic;
  OwningOpRef<ModuleOp> kernels;
  std::map<std::string, std::pair<std::string, std::vector<std::pair<DType, double>>>> bindings; // kernel -> symbol
  CompiledGraph result;
};

bool genericPipelines(GenericCompile &c, std::string *message) {
  const std::string dump = c.existing ? std::string() : c.options.dump_ir_dir;
  if (!runPipelineOnGraph(c.cc.context, c.graph, c.options, c.target, dump, &c.self, message))
    return false;
  if (!runPipelineOnGraph(c.cc.context, c.reference, c.options, c.target, "", &c.ref, message)) {
    *message = "(reference size) " + *message;
    return false;
  }
  return true;
}

bool genericGeneralize(GenericCompile &c, std::string *message) {
  if (c.self.fusions.size() != c.ref.fusions.size() || !c.self.backward != !c.ref.backward) {
    *message = "the two sizes give different kernels (" + std::to_string(c.self.fusions.size()) + " vs " +
               std::to_string(c.ref.fusions.size()) + ")";
    return false;
  }
  for (auto [fusion, reffusion] : llvm::zip(c.self.fusions, c.ref.fusions)) {
    FailureOr<KernelGeneralization> generic = generalizeKernel(fusion, reffusion, message);
    if (failed(generic))
      return false;
    c.generic.push_back(std::move(*generic));
  }
  return true;
}

/// The runtime scalars of `fusion`'s generic kernel, with their dtypes.
std::vector<std::pair<DType, double>> scalarBindings(ir::FusionOp fusion, const KernelGeneralization &generic) {
  std::vector<std::pair<DType, double>> scalars;
  std::vector<double> values = scalarArguments(fusion, generic);
  std::vector<Operation *> bodyOps;
  for (Operation &op : fusion.getBodyBlock().without_terminator())
    bodyOps.push_back(&op);
  for (auto [k, position] : llvm::enumerate(generic.scalarConstants)) {
    auto element = cast<RankedTensorType>(bodyOps[position]->getResult(0).getType()).getElementType();
    scalars.emplace_back(element.isF64() ? DType::Float64 : DType::Float32, values[k]);
  }
  return scalars;
}

bool genericEmitKernels(GenericCompile &c, std::string *message) {
  c.dynamic = std::make_shared<DynamicKernels>();
  if (c.existing) {
    *c.dynamic = *c.existing;
  } else {
    c.dynamic->reference = c.reference;
    c.dynamic->options = c.options;
    c.kernels = ModuleOp::create(UnknownLoc::get(&c.cc.context));
  }
  KernelDedup dedup(c.cc.context, c.dynamic->symbolOf);
  for (auto [fusion, generic] : llvm::zip(c.self.fusions, c.generic)) {
    auto emit = [&](ModuleOp into, StringRef symbol) {
      return c.target.emitGenericKernel(fusion, generic, symbol, into);
    };
    const std::string newSymbol = "dyn_" + std::to_string(dedup.symbols().size());
    std::string why;
    FailureOr<std::string> symbol = dedup.symbolFor(emit, c.kernels ? *c.kernels : ModuleOp(), newSymbol, &why);
    if (failed(symbol)) {
      *message = why.empty() ? "a kiln.fusion cannot be lowered"
                             : "kernel " + fusion.getKernel().str() + " has no shape-generic version for this size";
      return false;
    }
    c.bindings[fusion.getKernel().str()] = {*symbol, scalarBindings(fusion, generic)};
    c.result.fusions.push_back(describeFusion(fusion));
  }
  c.dynamic->symbolOf = dedup.symbols();
  return true;
}

bool genericCompileKernels(GenericCompile &c, std::string *message) {
  if (c.existing)
    return true;
  c.dynamic->library = buildLibrary(c.target, *c.kernels, c.options, &c.result, message);
  return c.dynamic->library != nullptr;
}

bool genericExecutables(GenericCompile &c, std::string *message) {
  std::shared_ptr<const DynamicKernels> keep = c.dynamic;
  KernelBinder bind = [&](ir::FusionOp fusion, std::string *why) {
    auto it = c.bindings.find(fusion.getKernel().str());
    if (it == c.bindings.end()) {
      *why = "no kernel bound to " + fusion.getKernel().str();
      return KernelBinding{};
    }
    const std::vector<std::pair<DType, double>> &scalars = it->second.second;
    // The generic kernel's symbol ("dyn_<k>") is what an exported artifact links to.
    if (keep->library->bindsScalars())
      return KernelBinding{keep->library->handle(it->second.first, scalars, false, why), {}, {}, {}, it->second.first};
    return KernelBinding{keep->library->handle(it->second.first, {}, false, why), scalars, {}, {}, it->second.first};
  };
  if (!buildExecutables(c.self, bind, keep, c.options.device, c.target, &c.result, message))
    return false;
  addLaunchFacts(*keep->library, &c.result, [&](const std::string &fusion) {
    auto it = c.bindings.find(fusion);
    return it == c.bindings.end() ? fusion : it->second.first;
  });
  readReports(c.self, c.graph, &c.result);
  c.result.dynamic = true;
  c.result.num_generic_kernels = static_cast<int>(c.dynamic->symbolOf.size());
  c.result.num_distinct_kernels = c.result.num_generic_kernels;
  return true;
}

/// THE shape-generic compile: its stages in order. Instantiating (existing
/// kernels) runs the same stages; kernels are only looked up, not compiled.
const Stage<GenericCompile> kGenericStages[] = {
    {"pipeline", genericPipelines},
    {"generalizing kernels", genericGeneralize},
    {"emitting kernels", genericEmitKernels},
    {"compiling kernels", genericCompileKernels},
    {"executable", genericExecutables},
};

/// Runs `stages` on `state` in order; the pipeline time is measured up to
/// the kernel compile. False and `*error` "<what>: <stage>: <message>".
template <typename State, size_t N>
bool runStages(const Stage<State> (&stages)[N], State &state, const char *what, Clock::time_point start,
               std::string *error) {
  for (const Stage<State> &stage : stages) {
    if (std::string(stage.name) == "compiling kernels")
      state.result.pipeline_seconds = secondsSince(start);
    std::string message;
    if (!stage.run(state, &message)) {
      *error = std::string(what) + ": " + stage.name + ": " + message + state.cc.diagnostics;
      return false;
    }
  }
  state.result.compile_seconds = secondsSince(start);
  return true;
}

void logCompile(const CompiledGraph &result) {
  if (!logCache())
    return;
  llvm::errs() << "kiln: compiled " << result.fusions.size() << " kernels (" << result.num_distinct_kernels
               << " distinct) in " << llvm::format("%.1f", result.compile_seconds * 1e3) << " ms (pipeline "
               << llvm::format("%.1f", result.pipeline_seconds * 1e3) << ", MLIR lowering "
               << llvm::format("%.1f", result.mlir_lowering_seconds * 1e3) << ", LLVM "
               << llvm::format("%.1f", result.llvm_seconds * 1e3) << ", cache load "
               << llvm::format("%.1f", result.cache_load_seconds * 1e3) << ")"
               << (result.kernel_cache_hit ? " [cache hit]" : "") << "\n";
}

/// compileGraph's body: the static stages.
bool buildStaticExecutables(const ir::Graph &graph, const CompileOptions &options, CompiledGraph *out,
                            std::string *error) {
  const auto start = Clock::now();
  std::shared_ptr<const Target> target = targetFor(options, error);
  if (!target)
    return false;
  CompilerContext cc(*target);
  StaticCompile state{graph, options, *target, cc, {}, {}, {}, {}, {}};
  if (!runStages(kStaticStages, state, "compile", start, error))
    return false;
  logCompile(state.result);
  *out = std::move(state.result);
  return true;
}

/// compileGraphDynamic (existing == null: emit and compile the generic
/// kernels) and instantiateGraphDynamic (existing: only look them up).
bool buildGenericExecutables(const ir::Graph &graph, const ir::Graph &reference, const CompileOptions &options,
                             std::shared_ptr<const DynamicKernels> existing, CompiledGraph *out,
                             std::shared_ptr<const DynamicKernels> *created, std::string *error) {
  const auto start = Clock::now();
  std::shared_ptr<const Target> target = targetFor(options, error);
  if (!target)
    return false;
  CompilerContext cc(*target);
  GenericCompile state{graph, reference, options, *target, cc, existing, {}, {}, {}, {}, {}, {}, {}};
  if (!runStages(kGenericStages, state, "compile (dynamic shapes)", start, error))
    return false;
  if (created)
    *created = state.dynamic;
  *out = std::move(state.result);
  return true;
}

template <typename F> bool guarded(F &&body, std::string *error) {
  std::string message;
  bool ok = false;
  try {
    ok = body(&message);
  } catch (const std::exception &e) {
    message = std::string("compile: unexpected exception: ") + e.what();
    ok = false;
  } catch (...) {
    message = "compile: unexpected exception";
    ok = false;
  }
  if (!ok && error)
    *error = message.empty() ? "compile: failed" : message;
  return ok;
}

} // namespace

bool hasCompileTarget(DeviceType type) { return findTarget(type) != nullptr; }

bool compileGraphDynamic(const ir::Graph &graph, const ir::Graph &reference, const CompileOptions &options,
                         CompiledGraph *out, std::shared_ptr<const DynamicKernels> *kernels, std::string *error) {
  return guarded(
      [&](std::string *message) {
        return buildGenericExecutables(graph, reference, options, nullptr, out, kernels, message);
      },
      error);
}

bool instantiateGraphDynamic(const ir::Graph &graph, const std::shared_ptr<const DynamicKernels> &kernels,
                             CompiledGraph *out, std::string *error) {
  if (!kernels) {
    if (error)
      *error = "instantiateGraphDynamic: no kernels";
    return false;
  }
  return guarded(
      [&](std::string *message) {
        return buildGenericExecutables(graph, kernels->reference, kernels->options, kernels, out, nullptr, message);
      },
      error);
}

bool compileGraph(const ir::Graph &graph, const CompileOptions &options, CompiledGraph *out, std::string *error) {
  // MLIR and LLVM never throw; `guarded` catches std::bad_alloc and anything
  // from the runtime side so no exception leaves the compiler.
  return guarded([&](std::string *message) { return buildStaticExecutables(graph, options, out, message); }, error);
}

} // namespace kiln::codegen
