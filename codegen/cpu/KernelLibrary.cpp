// KernelLibrary: one ExecutionEngine (ORC JIT) per compiled graph.
#include "CpuBackend.h"

#include <mutex>

#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"

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

KernelLibrary::~KernelLibrary() = default;

std::shared_ptr<KernelLibrary> KernelLibrary::create(ModuleOp llvmModule, std::string *error) {
  initializeNativeTarget();
  // The host's CPU name and features (AVX-512, AMX...), -O3 code generation.
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    if (error)
      *error = "JIT: cannot detect the host: " + llvm::toString(builder.takeError());
    return nullptr;
  }
  builder->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto machine = builder->createTargetMachine();
  if (!machine) {
    if (error)
      *error = "JIT: cannot create a target machine: " + llvm::toString(machine.takeError());
    return nullptr;
  }
  // ExecutionEngineOptions::transformer is a function_ref: this std::function
  // must outlive create() (TOOLCHAIN.md). The engine keeps the target machine
  // alive, so the raw pointer stays valid while the transformer runs.
  std::function<llvm::Error(llvm::Module *)> optimize =
      makeOptimizingTransformer(/*optLevel=*/3, /*sizeLevel=*/0, machine->get());
  ExecutionEngineOptions options;
  options.transformer = optimize;
  options.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  options.enableGDBNotificationListener = false;
  options.enablePerfNotificationListener = false;
  auto engine = ExecutionEngine::create(llvmModule, options, std::move(*machine));
  if (!engine) {
    if (error)
      *error = "JIT: " + llvm::toString(engine.takeError());
    return nullptr;
  }
  std::shared_ptr<KernelLibrary> library(new KernelLibrary());
  library->engine_ = std::move(*engine);
  return library;
}

runtime::PackedKernel KernelLibrary::lookup(const std::string &name, std::string *error) const {
  auto fn = engine_->lookupPacked(name);
  if (!fn) {
    if (error)
      *error = "JIT: kernel " + name + " not found: " + llvm::toString(fn.takeError());
    return nullptr;
  }
  return *fn;
}

} // namespace kiln::codegen::cpu
