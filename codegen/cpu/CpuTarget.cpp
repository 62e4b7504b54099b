// The CPU target: linalg kernels (EmitKernel.cpp), lowered to LLVM
// (LowerToLLVM.cpp) and JIT-compiled for the host (KernelLibrary.cpp).
#include "CpuBackend.h"

#include <algorithm>
#include <chrono>

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/TargetParser/Host.h"

namespace kiln::codegen::cpu {

namespace {

/// What the kernel cache key says about the JIT's code generation (the
/// optimization levels KernelLibrary.cpp uses; bump with them).
constexpr const char *kCodegenDescription = "cpu;opt=O2;codegen=Default;vector-width=512-on-avx512";

/// The step-time model's speeds on the 2-core development VM (bench/README.md):
/// oneDNN's GEMMs ~130 GFLOP/s, fused kernels ~26 GB/s, so a kernel byte
/// costs 5 matmul FLOPs (kiln-remat's ratio since it was written).
constexpr double kCpuFlopsPerSecond = 130e9;
constexpr double kCpuBytesPerSecond = 26e9;

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

class CpuTarget final : public Target {
public:
  std::string name() const override { return "cpu"; }
  void registerDialects(mlir::DialectRegistry &registry) const override { registerCpuBackend(registry); }
  mlir::LogicalResult emitKernel(ir::FusionOp fusion, mlir::ModuleOp kernels, llvm::StringRef name) const override {
    return cpu::emitKernel(fusion, kernels, name);
  }
  mlir::LogicalResult emitGenericKernel(ir::FusionOp fusion, const KernelGeneralization &generic,
                                        llvm::StringRef name, mlir::ModuleOp kernels) const override {
    return cpu::emitGenericKernel(fusion, generic, name, kernels);
  }
  std::string cacheKeyPrefix(mlir::MLIRContext *context) const override {
    static const std::string host = hostTargetDescription();
    return std::string(kCodegenDescription) + "|" + host + "|" + loweringDescription(context);
  }
  std::shared_ptr<KernelLibrary> compileKernels(mlir::ModuleOp kernels, const std::vector<std::string> &names,
                                                const std::string &dump_dir, bool keepObject,
                                                KernelCompileTimes *times, std::string *error) const override {
    auto start = Clock::now();
    if (mlir::failed(lowerKernelsToLLVM(kernels, dump_dir, error)))
      return nullptr;
    times->lowering_seconds = secondsSince(start);
    start = Clock::now();
    std::shared_ptr<KernelLibrary> library = OrcKernelLibrary::create(kernels, names, keepObject, error);
    times->codegen_seconds = secondsSince(start);
    return library;
  }
  std::shared_ptr<KernelLibrary> loadKernels(const std::string &object, const std::vector<std::string> &names,
                                             std::string *error) const override {
    return OrcKernelLibrary::load(object, names, error);
  }
  CostModel costModel() const override { return CostModel{kCpuBytesPerSecond, kCpuFlopsPerSecond}; }
};

} // namespace

std::string hostTargetDescription() {
  auto builder = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!builder) {
    llvm::consumeError(builder.takeError());
    return llvm::sys::getProcessTriple() + "|" + llvm::sys::getHostCPUName().str();
  }
  std::vector<std::string> features = builder->getFeatures().getFeatures();
  std::sort(features.begin(), features.end()); // independent of map order
  std::string out = builder->getTargetTriple().str() + "|" + builder->getCPU() + "|";
  for (const std::string &f : features)
    out += f + ",";
  return out;
}

} // namespace kiln::codegen::cpu

namespace kiln::codegen {

std::shared_ptr<const Target> cpuTarget() {
  static const std::shared_ptr<const Target> target = std::make_shared<cpu::CpuTarget>();
  return target;
}

} // namespace kiln::codegen
