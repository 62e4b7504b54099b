// compileGraph: Graph -> kiln module -> pipeline -> kernels (JIT) -> Executables.
#include "kiln/codegen/Compiler.h"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <map>
#include <vector>

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include "cpu/CpuBackend.h"
#include "kiln/ir/GraphBuilder.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Pipeline.h"

namespace kiln::codegen {

using namespace mlir;

namespace {

int64_t tensorBytes(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  auto dtype = cpu::dtypeOf(tensor.getElementType());
  return tensor.getNumElements() * (succeeded(dtype) ? static_cast<int64_t>(itemsize(*dtype)) : 0);
}

/// Size and traffic of one kiln.fusion, for reports.
FusionInfo describeFusion(ir::FusionOp fusion) {
  FusionInfo info;
  info.name = fusion.getKernel().str();
  info.num_ops = static_cast<int>(fusion.getBodyBlock().getOperations().size()) - 1; // not yield
  for (Value v : fusion.getInputs())
    info.bytes_read += tensorBytes(v.getType());
  for (Value v : fusion.getResults())
    info.bytes_written += tensorBytes(v.getType());
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

/// The pipeline's options for `options` (remat, memory budget, autocast).
bool pipelineOptions(const CompileOptions &options, const std::string &dump_dir, passes::PipelineOptions *pipeline,
                     std::string *error) {
  pipeline->dump_ir_dir = dump_dir;
  pipeline->remat = options.remat;
  pipeline->memory_budget = options.memory_budget;
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
/// linked as is (no MLIR lowering, no LLVM); otherwise the kernels are lowered
/// and compiled, and the object is stored (overwriting a bad entry). Cache
/// problems never fail the compile; they only cost the compile.
std::shared_ptr<cpu::KernelLibrary> buildLibrary(ModuleOp kernels, const CompileOptions &options,
                                                 CompiledGraph *result, std::string *stage, std::string *error) {
  std::vector<std::string> names;
  for (auto func : kernels.getOps<func::FuncOp>())
    names.push_back(func.getSymName().str());
  const std::string dir = names.empty() ? "" : resolveKernelCacheDir(options);
  cpu::KernelCacheCounters &counters = cpu::kernelCacheCounters();
  std::string path;
  if (!dir.empty()) {
    result->kernel_cache_key = cpu::kernelCacheKey(kernels, cpu::loweringDescription(kernels.getContext()));
    path = cpu::kernelCachePath(dir, result->kernel_cache_key);
  }

  if (!path.empty() && options.dump_ir_dir.empty()) {
    auto start = Clock::now();
    std::string object, why;
    cpu::CacheRead read = cpu::readCachedObject(path, result->kernel_cache_key, &object, &why);
    std::shared_ptr<cpu::KernelLibrary> library;
    if (read == cpu::CacheRead::Ok) {
      library = cpu::KernelLibrary::load(object, names, &why);
      if (!library)
        read = cpu::CacheRead::Corrupt;
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
    if (read == cpu::CacheRead::Corrupt) {
      counters.bad_entries++;
      if (logCache())
        llvm::errs() << "kiln: kernel cache: bad entry, recompiling: " << why << "\n";
    }
  }

  auto start = Clock::now();
  *stage = "lowering kernels";
  if (failed(cpu::lowerKernelsToLLVM(kernels, options.dump_ir_dir, error)))
    return nullptr;
  *stage = "JIT";
  result->mlir_lowering_seconds = secondsSince(start);
  start = Clock::now();
  std::shared_ptr<cpu::KernelLibrary> library =
      cpu::KernelLibrary::create(kernels, names, /*keepObject=*/!path.empty(), error);
  result->llvm_seconds = secondsSince(start);
  if (!library)
    return nullptr;
  if (!path.empty()) {
    std::string why;
    if (cpu::storeCachedObject(*library, path, result->kernel_cache_key, &why)) {
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

/// An MLIRContext with the kiln dialect and the CPU backend's dialects
/// loaded, whose error diagnostics (verifier, passes, lowering) are collected
/// into `diagnostics` for the compile error.
struct CompilerContext {
  DialectRegistry registry;
  MLIRContext context;
  std::string diagnostics;
  ScopedDiagnosticHandler handler;

  static DialectRegistry makeRegistry() {
    DialectRegistry r;
    ir::registerKilnDialect(r);
    cpu::registerCpuBackend(r);
    return r;
  }
  CompilerContext()
      : registry(makeRegistry()), context(registry, MLIRContext::Threading::DISABLED),
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

/// The stages, in order: build the module, run the pipeline, emit one kernel
/// module for every kiln.fusion, lower it to LLVM, JIT it, and build one
/// LaunchExecutable per function.
bool compile(const ir::Graph &graph, const CompileOptions &options, CompiledGraph *out, std::string *error) {
  const auto start = Clock::now();
  CompilerContext cc;
  MLIRContext &context = cc.context;
  auto fail = [&](const std::string &stage, const std::string &message) {
    *error = "compile: " + stage + ": " + message + cc.diagnostics;
    return false;
  };

  std::string message;
  OwningOpRef<ModuleOp> module = ir::buildModule(context, graph, &message);
  if (!module)
    return fail("buildModule", message);
  passes::PipelineOptions pipeline;
  if (!pipelineOptions(options, options.dump_ir_dir, &pipeline, &message))
    return fail("options", message);
  if (failed(passes::runPipeline(*module, pipeline, &message)))
    return fail("pipeline", message);
  CompiledGraph result;
  readAutocastReport(*module, &result);

  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  auto backward = module->lookupSymbol<func::FuncOp>("backward");
  if (!forward)
    return fail("pipeline", "no func @forward after the pipeline");

  // One kernel module for the whole graph: the JIT cost is paid once.
  // Fusions whose kernels are identical up to their name (the same block
  // repeated in a model, the same epilogue in every layer) share one
  // function: each distinct kernel is lowered and compiled once.
  OwningOpRef<ModuleOp> kernels = ModuleOp::create(UnknownLoc::get(&context));
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(UnknownLoc::get(&context));
  std::map<std::string, std::string> symbolOfKernel; // kernel IR named @kernel -> symbol
  std::map<std::string, std::string> symbolOf;       // fusion kernel name -> symbol
  for (func::FuncOp func : {forward, backward}) {
    if (!func)
      continue;
    WalkResult walk = func.walk([&](ir::FusionOp fusion) {
      if (symbolOf.count(fusion.getKernel().str())) {
        fusion.emitOpError("duplicate kernel name ") << fusion.getKernel();
        return WalkResult::interrupt();
      }
      result.fusions.push_back(describeFusion(fusion));
      if (failed(cpu::emitKernel(fusion, *scratch, "kernel")))
        return WalkResult::interrupt();
      std::string key;
      {
        llvm::raw_string_ostream os(key);
        for (Operation &op : scratch->getBody()->getOperations())
          op.print(os);
      }
      scratch->getBody()->clear();
      auto [it, inserted] = symbolOfKernel.try_emplace(key, fusion.getKernel().str());
      if (inserted && failed(cpu::emitKernel(fusion, *kernels)))
        return WalkResult::interrupt();
      symbolOf[fusion.getKernel().str()] = it->second;
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return fail("emitting kernels", "a kiln.fusion cannot be lowered");
  }
  result.num_distinct_kernels = static_cast<int>(symbolOfKernel.size());
  result.frontend_seconds = secondsSince(start);
  std::string stage;
  std::shared_ptr<cpu::KernelLibrary> library = buildLibrary(*kernels, options, &result, &stage, &message);
  if (!library)
    return fail(stage, message);

  cpu::KernelBinder bind = [&](ir::FusionOp fusion, std::string *why) {
    auto it = symbolOf.find(fusion.getKernel().str());
    if (it == symbolOf.end()) {
      *why = "no kernel emitted for " + fusion.getKernel().str();
      return cpu::KernelBinding{};
    }
    return cpu::KernelBinding{library->lookup(it->second, why), {}, {}, cpu::isRowSplittable(fusion),
                              cpu::inPlacePairs(fusion)};
  };
  result.forward = cpu::buildExecutable(forward, bind, library, &message);
  if (!result.forward)
    return fail("executable", message);
  if (backward) {
    result.backward = cpu::buildExecutable(backward, bind, library, &message);
    if (!result.backward)
      return fail("executable", message);
  }
  result.num_forward_outputs =
      static_cast<int>(intAttr(forward, "kiln.num_forward_outputs", graph.num_forward_outputs));
  result.num_saved = static_cast<int>(intAttr(forward, "kiln.num_saved", 0));
  readRematReport(forward, backward, &result);
  result.compile_seconds = secondsSince(start);
  if (logCache())
    llvm::errs() << "kiln: compiled " << result.fusions.size() << " kernels (" << result.num_distinct_kernels
                 << " distinct) in "
                 << llvm::format("%.1f", result.compile_seconds * 1e3) << " ms (frontend "
                 << llvm::format("%.1f", result.frontend_seconds * 1e3) << ", MLIR lowering "
                 << llvm::format("%.1f", result.mlir_lowering_seconds * 1e3) << ", LLVM "
                 << llvm::format("%.1f", result.llvm_seconds * 1e3) << ", cache load "
                 << llvm::format("%.1f", result.cache_load_seconds * 1e3) << ")"
                 << (result.kernel_cache_hit ? " [cache hit]" : "") << "\n";
  *out = std::move(result);
  return true;
}

/// Everything compileDynamic needs from one graph: its module after the
/// pipeline, and its kernels in order (forward, then backward).
struct Lowered {
  OwningOpRef<ModuleOp> module;
  func::FuncOp forward, backward;
  std::vector<ir::FusionOp> fusions;
};

bool lowerGraph(MLIRContext &context, const ir::Graph &graph, const CompileOptions &options,
                const std::string &dump_dir, Lowered *out, std::string *message) {
  out->module = ir::buildModule(context, graph, message);
  if (!out->module)
    return false;
  passes::PipelineOptions pipeline;
  if (!pipelineOptions(options, dump_dir, &pipeline, message))
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

} // namespace

/// The shape-generic kernels of a dynamic graph and how to find them.
struct DynamicKernels {
  ir::Graph reference;                         ///< the graph at the reference size
  std::shared_ptr<cpu::KernelLibrary> library; ///< owns the JIT code
  std::map<std::string, std::string> symbolOf; ///< generic kernel IR -> symbol in `library`
  CompileOptions options;
};

namespace {

/// compileGraphDynamic (existing == null: emit and JIT the generic kernels)
/// and instantiateGraphDynamic (existing: only look them up).
bool compileDynamic(const ir::Graph &graph, const ir::Graph &reference, const CompileOptions &options,
                    std::shared_ptr<const DynamicKernels> existing, CompiledGraph *out,
                    std::shared_ptr<const DynamicKernels> *created, std::string *error) {
  const auto start = Clock::now();
  CompilerContext cc;
  MLIRContext &context = cc.context;
  auto fail = [&](const std::string &stage, const std::string &message) {
    *error = "compile (dynamic shapes): " + stage + ": " + message + cc.diagnostics;
    return false;
  };

  std::string message;
  Lowered self, ref;
  if (!lowerGraph(context, graph, options, existing ? std::string() : options.dump_ir_dir, &self, &message))
    return fail("pipeline", message);
  if (!lowerGraph(context, reference, options, "", &ref, &message))
    return fail("pipeline (reference size)", message);
  if (self.fusions.size() != ref.fusions.size() || !self.backward != !ref.backward)
    return fail("generalizing kernels", "the two sizes give different kernels (" +
                                            std::to_string(self.fusions.size()) + " vs " +
                                            std::to_string(ref.fusions.size()) + ")");

  auto dynamic = std::make_shared<DynamicKernels>();
  if (existing)
    *dynamic = *existing;
  else {
    dynamic->reference = reference;
    dynamic->options = options;
  }
  OwningOpRef<ModuleOp> kernels = ModuleOp::create(UnknownLoc::get(&context));
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(UnknownLoc::get(&context));
  std::map<std::string, std::pair<std::string, std::vector<std::pair<DType, double>>>> bindings; // kernel -> symbol
  CompiledGraph result;
  for (auto [fusion, reffusion] : llvm::zip(self.fusions, ref.fusions)) {
    FailureOr<cpu::KernelGeneralization> generic = cpu::generalizeKernel(fusion, reffusion, &message);
    if (failed(generic))
      return fail("generalizing kernels", message);
    if (failed(cpu::emitGenericKernel(fusion, *generic, "kernel", *scratch)))
      return fail("emitting kernels", "a kiln.fusion cannot be lowered");
    std::string key;
    {
      llvm::raw_string_ostream os(key);
      for (Operation &op : scratch->getBody()->getOperations())
        op.print(os);
    }
    scratch->getBody()->clear();
    auto found = dynamic->symbolOf.find(key);
    if (found == dynamic->symbolOf.end()) {
      if (existing)
        return fail("generalizing kernels", "kernel " + fusion.getKernel().str() +
                                                " has no shape-generic version for this size");
      std::string symbol = "dyn_" + std::to_string(dynamic->symbolOf.size());
      if (failed(cpu::emitGenericKernel(fusion, *generic, symbol, *kernels)))
        return fail("emitting kernels", "a kiln.fusion cannot be lowered");
      found = dynamic->symbolOf.emplace(key, symbol).first;
    }
    std::vector<std::pair<DType, double>> scalars;
    std::vector<double> values = cpu::scalarArguments(fusion, *generic);
    Block &body = fusion.getBodyBlock();
    std::vector<Operation *> bodyOps;
    for (Operation &op : body.without_terminator())
      bodyOps.push_back(&op);
    for (auto [k, position] : llvm::enumerate(generic->scalarConstants)) {
      auto element = cast<RankedTensorType>(bodyOps[position]->getResult(0).getType()).getElementType();
      scalars.emplace_back(element.isF64() ? DType::Float64 : DType::Float32, values[k]);
    }
    bindings[fusion.getKernel().str()] = {found->second, std::move(scalars)};
    result.fusions.push_back(describeFusion(fusion));
  }
  result.frontend_seconds = secondsSince(start);
  if (!existing) {
    std::string stage;
    dynamic->library = buildLibrary(*kernels, options, &result, &stage, &message);
    if (!dynamic->library)
      return fail(stage, message);
  }
  std::shared_ptr<const DynamicKernels> keep = dynamic;
  cpu::KernelBinder bind = [&](ir::FusionOp fusion, std::string *why) {
    auto it = bindings.find(fusion.getKernel().str());
    if (it == bindings.end()) {
      *why = "no kernel bound to " + fusion.getKernel().str();
      return cpu::KernelBinding{};
    }
    return cpu::KernelBinding{keep->library->lookup(it->second.first, why), it->second.second, {}, false};
  };
  result.forward = cpu::buildExecutable(self.forward, bind, keep, &message);
  if (!result.forward)
    return fail("executable", message);
  if (self.backward) {
    result.backward = cpu::buildExecutable(self.backward, bind, keep, &message);
    if (!result.backward)
      return fail("executable", message);
  }
  result.num_forward_outputs =
      static_cast<int>(intAttr(self.forward, "kiln.num_forward_outputs", graph.num_forward_outputs));
  result.num_saved = static_cast<int>(intAttr(self.forward, "kiln.num_saved", 0));
  readRematReport(self.forward, self.backward, &result);
  readAutocastReport(*self.module, &result);
  result.dynamic = true;
  result.num_generic_kernels = static_cast<int>(dynamic->symbolOf.size());
  result.num_distinct_kernels = result.num_generic_kernels;
  result.compile_seconds = secondsSince(start);
  if (created)
    *created = keep;
  *out = std::move(result);
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

bool compileGraphDynamic(const ir::Graph &graph, const ir::Graph &reference, const CompileOptions &options,
                         CompiledGraph *out, std::shared_ptr<const DynamicKernels> *kernels, std::string *error) {
  return guarded([&](std::string *message) { return compileDynamic(graph, reference, options, nullptr, out, kernels, message); },
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
        return compileDynamic(graph, kernels->reference, kernels->options, kernels, out, nullptr, message);
      },
      error);
}

bool compileGraph(const ir::Graph &graph, const CompileOptions &options, CompiledGraph *out, std::string *error) {
  // MLIR and LLVM never throw; `guarded` catches std::bad_alloc and anything
  // from the runtime side so no exception leaves the compiler.
  return guarded([&](std::string *message) { return compile(graph, options, out, message); }, error);
}

} // namespace kiln::codegen
