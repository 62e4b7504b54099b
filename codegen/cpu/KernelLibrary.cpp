// KernelLibrary: one ExecutionEngine (ORC JIT) per compiled graph, or, on a
// kernel cache hit, one ORC LLJIT holding the cached object code.
#include "CpuBackend.h"

#include "KernelCache.h"

#include <cstdlib>

#include <mutex>

#include "mlir/ExecutionEngine/CRunnerUtils.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/RTDyldObjectLinkingLayer.h"
#include "llvm/ExecutionEngine/SectionMemoryManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

namespace kiln::codegen::cpu {

using namespace mlir;

namespace {

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

} // namespace

OrcKernelLibrary::~OrcKernelLibrary() = default;

/// Runtime helpers that lowered kernels may call (a memref.copy between
/// strided views becomes a call to memrefCopy), bound to this process's
/// copies from libmlir_c_runner_utils.
static llvm::orc::SymbolMap runtimeSymbols(llvm::orc::MangleAndInterner interner) {
  llvm::orc::SymbolMap map;
  map[interner("memrefCopy")] = {llvm::orc::ExecutorAddr::fromPtr(&memrefCopy), llvm::JITSymbolFlags::Exported};
  return map;
}

std::shared_ptr<OrcKernelLibrary> OrcKernelLibrary::create(ModuleOp llvmModule, std::string *error) {
  return create(llvmModule, {}, /*keepObject=*/false, error);
}

std::shared_ptr<OrcKernelLibrary> OrcKernelLibrary::create(ModuleOp llvmModule, const std::vector<std::string> &kernels,
                                                     bool keepObject, std::string *error) {
  initializeNativeTarget();
  kernelCacheCounters().llvm_compiles++;
  // The host's CPU name and features (AVX-512, AMX...), -O2 (CodeGenOptLevel::Default) code generation.
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    if (error)
      *error = "JIT: cannot detect the host: " + llvm::toString(builder.takeError());
    return nullptr;
  }
  builder->setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
  auto machine = builder->createTargetMachine();
  if (!machine) {
    if (error)
      *error = "JIT: cannot create a target machine: " + llvm::toString(machine.takeError());
    return nullptr;
  }
  // ExecutionEngineOptions::transformer is a function_ref: this std::function
  // must outlive create() (TOOLCHAIN.md). The engine keeps the target machine
  // alive, so the raw pointer stays valid while the transformer runs.
  // On AVX-512 hosts the kernels vectorize 16 floats wide: LLVM's default
  // for this CPU prefers 256-bit vectors; the compute-bound kernels (exp
  // polynomials: softmax, GELU) ran ~20% faster at 512 here, the
  // memory-bound ones the same (bench/README.md).
  const bool wide = llvm::sys::getHostCPUFeatures().lookup("avx512f");
  std::function<llvm::Error(llvm::Module *)> base =
      makeOptimizingTransformer(/*optLevel=*/2, /*sizeLevel=*/0, machine->get());
  std::function<llvm::Error(llvm::Module *)> optimize = [&base, wide](llvm::Module *m) {
    if (wide)
      for (llvm::Function &f : *m)
        if (!f.isDeclaration())
          f.addFnAttr("prefer-vector-width", "512");
    return base(m);
  };
  ExecutionEngineOptions options;
  options.transformer = optimize;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Default;
  options.enableGDBNotificationListener = false;
  // KILN_PERF=1: tell perf about the JIT code (jit-<pid>.dump for
  // `perf record -k 1` + `perf inject --jit`), so kernels have names in
  // profiles. Objects loaded from the kernel cache are not registered.
  options.enablePerfNotificationListener = std::getenv("KILN_PERF") != nullptr;
  options.enableObjectDump = keepObject; // a SimpleObjectCache keeps the object
  auto engine = ExecutionEngine::create(llvmModule, options, std::move(*machine));
  if (!engine) {
    if (error)
      *error = "JIT: " + llvm::toString(engine.takeError());
    return nullptr;
  }
  (*engine)->registerSymbols(runtimeSymbols);
  std::shared_ptr<OrcKernelLibrary> library(new OrcKernelLibrary());
  library->engine_ = std::move(*engine);
  library->keepObject_ = keepObject;
  // The first lookup compiles the whole module (one IR module, one object).
  for (const std::string &name : kernels)
    if (!library->lookup(name, error))
      return nullptr;
  return library;
}

std::shared_ptr<OrcKernelLibrary> OrcKernelLibrary::load(const std::string &object, const std::vector<std::string> &kernels,
                                                   std::string *error) {
  initializeNativeTarget();
  auto fail = [&](const std::string &what, llvm::Error err) -> std::shared_ptr<OrcKernelLibrary> {
    if (error)
      *error = "JIT (cached object): " + what + ": " + llvm::toString(std::move(err));
    return nullptr;
  };
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder)
    return fail("cannot detect the host", builder.takeError());
  builder->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  // The same linker as the ExecutionEngine (RuntimeDyld + SectionMemoryManager);
  // process symbols (malloc, free, ...) resolve through LLJIT's default
  // process-symbols JITDylib.
  auto jit = llvm::orc::LLJITBuilder()
                 .setJITTargetMachineBuilder(std::move(*builder))
                 .setObjectLinkingLayerCreator([](llvm::orc::ExecutionSession &session, const llvm::Triple &) {
                   return std::make_unique<llvm::orc::RTDyldObjectLinkingLayer>(
                       session, [] { return std::make_unique<llvm::SectionMemoryManager>(); });
                 })
                 .create();
  if (!jit)
    return fail("cannot create an LLJIT", jit.takeError());
  llvm::orc::MangleAndInterner interner((*jit)->getExecutionSession(), (*jit)->getDataLayout());
  if (llvm::Error err = (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(runtimeSymbols(interner))))
    return fail("cannot define runtime symbols", std::move(err));
  if (llvm::Error err =
          (*jit)->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, "kiln-cached-kernels.o")))
    return fail("cannot add the object", std::move(err));
  std::shared_ptr<OrcKernelLibrary> library(new OrcKernelLibrary());
  library->jit_ = std::move(*jit);
  // Links the object now: a bad object fails here, not at the first launch.
  for (const std::string &name : kernels)
    if (!library->lookup(name, error))
      return nullptr;
  return library;
}

bool OrcKernelLibrary::dumpObject(const std::string &path, std::string *error) const {
  if (!engine_ || !keepObject_) {
    if (error)
      *error = "the kernel library keeps no object code";
    return false;
  }
  engine_->dumpToObjectFile(path); // compiles first if nothing was looked up
  return true;
}

runtime::PackedKernel OrcKernelLibrary::lookup(const std::string &name, std::string *error) const {
  if (jit_) {
    // MLIR's packed wrapper; the error is turned into a string right away
    // (it may refer to strings owned by the JIT).
    auto addr = jit_->lookup("_mlir_" + name);
    if (!addr) {
      if (error)
        *error = "JIT: kernel " + name + " not found in the cached object: " + llvm::toString(addr.takeError());
      return nullptr;
    }
    auto fn = addr->toPtr<void (*)(void **)>();
    if (!fn && error)
      *error = "JIT: kernel " + name + " has a null address in the cached object";
    return fn;
  }
  auto fn = engine_->lookupPacked(name);
  if (!fn) {
    if (error)
      *error = "JIT: kernel " + name + " not found: " + llvm::toString(fn.takeError());
    return nullptr;
  }
  return *fn;
}

} // namespace kiln::codegen::cpu
