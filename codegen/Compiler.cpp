// compileGraph: Graph -> kiln module -> pipeline -> kernels (JIT) -> Executables.
#include "kiln/codegen/Compiler.h"

#include <exception>

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
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

/// The stages, in order: build the module, run the pipeline, emit one kernel
/// module for every kiln.fusion, lower it to LLVM, JIT it, and build one
/// LaunchExecutable per function.
bool compile(const ir::Graph &graph, const CompileOptions &options, CompiledGraph *out, std::string *error) {
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
  if (failed(passes::runPipeline(*module, pipeline, &message)))
    return fail("pipeline", message);

  auto forward = module->lookupSymbol<func::FuncOp>("forward");
  auto backward = module->lookupSymbol<func::FuncOp>("backward");
  if (!forward)
    return fail("pipeline", "no func @forward after the pipeline");

  // One kernel module for the whole graph: the JIT cost is paid once.
  OwningOpRef<ModuleOp> kernels = ModuleOp::create(UnknownLoc::get(&context));
  CompiledGraph result;
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
  if (failed(cpu::lowerKernelsToLLVM(*kernels, options.dump_ir_dir, &message)))
    return fail("lowering kernels", message);
  std::shared_ptr<cpu::KernelLibrary> library = cpu::KernelLibrary::create(*kernels, &message);
  if (!library)
    return fail("JIT", message);

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
