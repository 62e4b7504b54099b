// compileGraph: Graph -> kiln module -> pipeline -> kernels (JIT) -> Executables.
#include "kiln/codegen/Compiler.h"

#include <chrono>
#include <cstdlib>
#include <exception>
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

/// The stages, in order: build the module, run the pipeline, emit one kernel
/// module for every kiln.fusion, lower it to LLVM, JIT it, and build one
/// LaunchExecutable per function.
bool compile(const ir::Graph &graph, const CompileOptions &options, CompiledGraph *out, std::string *error) {
  const auto start = Clock::now();
  DialectRegistry registry;
  ir::registerKilnDialect(registry);
  cpu::registerCpuBackend(registry);
  MLIRContext context(registry, MLIRContext::Threading::DISABLED);
  ir::loadKilnDialects(context);
  context.loadAllAvailableDialects();

  // MLIR diagnostics (from the verifier, passes, lowering) go into the error.
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diag.getSeverity() != DiagnosticSeverity::Error)
      return success();
    llvm::raw_string_ostream os(diagnostics);
    os << "\n  " << diag.getLocation() << ": " << diag.str();
    return success();
  });
  auto fail = [&](const std::string &stage, const std::string &message) {
    *error = "compile: " + stage + ": " + message + diagnostics;
    return false;
  };

  std::string message;
  OwningOpRef<ModuleOp> module = ir::buildModule(context, graph, &message);
  if (!module)
    return fail("buildModule", message);
  passes::PipelineOptions pipeline;
  pipeline.dump_ir_dir = options.dump_ir_dir;
  if (options.autocast != DType::Float32) {
    if (options.autocast != DType::BFloat16 && options.autocast != DType::Float16)
      return fail("options", std::string("autocast must be float32 (off), bfloat16 or float16, got ") +
                                 dtype_name(options.autocast));
    pipeline.autocast = options.autocast == DType::BFloat16 ? "bf16" : "f16";
  }
  if (failed(passes::runPipeline(*module, pipeline, &message)))
    return fail("pipeline", message);
  CompiledGraph result;
  readAutocastReport(*module, &result);

  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  auto backward = module->lookupSymbol<func::FuncOp>("backward");
  if (!forward)
    return fail("pipeline", "no func @forward after the pipeline");

  // One kernel module for the whole graph: the JIT cost is paid once.
  OwningOpRef<ModuleOp> kernels = ModuleOp::create(UnknownLoc::get(&context));
  for (func::FuncOp func : {forward, backward}) {
    if (!func)
      continue;
    WalkResult walk = func.walk([&](ir::FusionOp fusion) {
      if (kernels->lookupSymbol(fusion.getKernel())) {
        fusion.emitOpError("duplicate kernel name ") << fusion.getKernel();
        return WalkResult::interrupt();
      }
      result.fusions.push_back(describeFusion(fusion));
      return failed(cpu::emitKernel(fusion, *kernels)) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return fail("emitting kernels", "a kiln.fusion cannot be lowered");
  }
  result.frontend_seconds = secondsSince(start);
  std::string stage;
  std::shared_ptr<cpu::KernelLibrary> library = buildLibrary(*kernels, options, &result, &stage, &message);
  if (!library)
    return fail(stage, message);

  result.forward = cpu::buildExecutable(forward, library, &message);
  if (!result.forward)
    return fail("executable", message);
  if (backward) {
    result.backward = cpu::buildExecutable(backward, library, &message);
    if (!result.backward)
      return fail("executable", message);
  }
  result.num_forward_outputs =
      static_cast<int>(intAttr(forward, "kiln.num_forward_outputs", graph.num_forward_outputs));
  result.num_saved = static_cast<int>(intAttr(forward, "kiln.num_saved", 0));
  result.compile_seconds = secondsSince(start);
  if (logCache())
    llvm::errs() << "kiln: compiled " << result.fusions.size() << " kernels in "
                 << llvm::format("%.1f", result.compile_seconds * 1e3) << " ms (frontend "
                 << llvm::format("%.1f", result.frontend_seconds * 1e3) << ", MLIR lowering "
                 << llvm::format("%.1f", result.mlir_lowering_seconds * 1e3) << ", LLVM "
                 << llvm::format("%.1f", result.llvm_seconds * 1e3) << ", cache load "
                 << llvm::format("%.1f", result.cache_load_seconds * 1e3) << ")"
                 << (result.kernel_cache_hit ? " [cache hit]" : "") << "\n";
  *out = std::move(result);
  return true;
}

} // namespace

bool compileGraph(const ir::Graph &graph, const CompileOptions &options, CompiledGraph *out, std::string *error) {
  std::string message;
  bool ok = false;
  // MLIR and LLVM never throw; this catches std::bad_alloc and anything from
  // the runtime side so no exception leaves the compiler.
  try {
    ok = compile(graph, options, out, &message);
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

} // namespace kiln::codegen
