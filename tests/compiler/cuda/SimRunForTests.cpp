// SimRunForTests.h: an emitted kernel on the simulator, the same fusion on
// the CPU target, and the fuzzer's comparison rule.
#include "SimRunForTests.h"
#include "FuseForTests.h"

#include <cmath>
#include <map>
#include <optional>
#include <memory>
#include <regex>
#include <sstream>

#include "CpuWork.h" // runtime/src/cpu: launch_kernel
#include "Half.h"    // runtime/src/cpu: the reference f16/bf16 conversions
#include "GeneralizeKernel.h"
#include "KernelAbi.h"

#include "kiln/codegen/Target.h"
#include "kiln/runtime/Allocator.h"
#include "kiln/runtime/LaunchExecutable.h"
#include "kiln/runtime/sim/Grid.h"
#include "kiln/runtime/sim/SimMemory.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"

namespace kiln::test {

using codegen::cuda::EmittedKernel;
using codegen::cuda::KernelParam;
namespace sim = kiln::runtime::sim;

// ---- HostTensor ----

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

double HostTensor::at(int64_t i) const {
  const unsigned char *p = bytes.data() + i * itemsize(dtype);
  switch (dtype) {
  case DType::Float32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case DType::Float64: {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  case DType::Float16:
  case DType::BFloat16: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return dtype == DType::Float16 ? runtime::cpu::half_to_float(h) : runtime::cpu::bf16_to_float(h);
  }
  case DType::Int64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return static_cast<double>(v);
  }
  case DType::Int32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::Bool:
    return *p;
  }
  return 0;
}

void HostTensor::set(int64_t i, double value) {
  unsigned char *p = bytes.data() + i * itemsize(dtype);
  auto put = [p](auto v) { std::memcpy(p, &v, sizeof(v)); };
  switch (dtype) {
  case DType::Float32:
    return put(static_cast<float>(value));
  case DType::Float64:
    return put(value);
  case DType::Float16:
    return put(runtime::cpu::float_to_half(static_cast<float>(value)));
  case DType::BFloat16:
    return put(runtime::cpu::float_to_bf16(static_cast<float>(value)));
  case DType::Int64:
    return put(static_cast<int64_t>(value));
  case DType::Int32:
    return put(static_cast<int32_t>(value));
  case DType::Bool:
    return put(static_cast<unsigned char>(value != 0));
  }
}

HostTensor zeros(DType dtype, std::vector<int64_t> shape) {
  HostTensor t{dtype, std::move(shape), {}};
  t.bytes.assign(t.numel() * itemsize(dtype), 0);
  return t;
}

HostTensor filled(DType dtype, std::vector<int64_t> shape, const std::function<double(int64_t)> &fn) {
  HostTensor t = zeros(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.set(i, fn(i));
  return t;
}

namespace {

bool isFloat(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

DType dtypeOfType(mlir::Type type) {
  auto ranked = mlir::cast<mlir::RankedTensorType>(type);
  mlir::FailureOr<DType> d = codegen::dtypeOf(ranked.getElementType());
  return mlir::succeeded(d) ? *d : DType::Float32;
}

std::vector<int64_t> shapeOf(mlir::Type type) {
  auto ranked = mlir::cast<mlir::RankedTensorType>(type);
  return {ranked.getShape().begin(), ranked.getShape().end()};
}

mlir::func::FuncOp enclosingFunction(ir::FusionOp fusion) {
  return fusion->getParentOfType<mlir::func::FuncOp>();
}

/// The function argument whose memory fusion operand `i` reads, or -1.
int rootArgument(ir::FusionOp fusion, unsigned i) {
  auto arg = mlir::dyn_cast<mlir::BlockArgument>(codegen::memoryRoot(fusion.getInputs()[i]));
  return arg ? static_cast<int>(arg.getArgNumber()) : -1;
}

/// Checks each operand roots in an argument of the right element count.
std::string checkArgs(ir::FusionOp fusion, const std::vector<HostTensor> &args) {
  for (unsigned i = 0; i < fusion.getInputs().size(); ++i) {
    const int a = rootArgument(fusion, i);
    if (a < 0 || a >= static_cast<int>(args.size()))
      return "fusion operand " + std::to_string(i) + " is not a view of a function argument given";
  }
  return "";
}

} // namespace

std::vector<HostTensor> defaultArgs(ir::FusionOp fusion, uint32_t seed) {
  std::vector<HostTensor> args;
  for (auto [a, type] : llvm::enumerate(enclosingFunction(fusion).getArgumentTypes())) {
    uint32_t s = 12345u + 977u * seed + 7919u * static_cast<uint32_t>(a);
    auto next = [&s] {
      s = s * 1664525u + 1013904223u;
      return s >> 8;
    };
    const DType dtype = dtypeOfType(type);
    args.push_back(filled(dtype, shapeOf(type), [&](int64_t i) -> double {
      if (dtype == DType::Bool)
        return i % 2;
      if (!isFloat(dtype))
        return next() % 8;
      return static_cast<double>(next() % 4000) / 1000.0 - 2.0 + 0.0005;
    }));
  }
  return args;
}

// ---- the simulator ----

namespace {

/// sim::allocate'd copies of the arguments, the results and status words.
struct SimBuffers {
  std::vector<void *> args, results, statuses;
  ~SimBuffers() {
    for (auto *list : {&args, &results, &statuses})
      for (void *p : *list)
        sim::deallocate(p);
  }
};

/// The by-value parameters (sizes, strides, scalars) as cuLaunchKernel wants them.
struct ValueParams {
  std::vector<long long> ints;
  std::vector<double> doubles;
  std::vector<float> floats;
};

/// The size of each size class of `generic` in `fusion`: the dim its
/// source argument (operands, then results) has.
std::vector<int64_t> classSizes(ir::FusionOp fusion, const codegen::KernelGeneralization &generic) {
  std::vector<int64_t> sizes;
  const int operands = static_cast<int>(fusion.getInputs().size());
  for (auto [arg, dim] : generic.sources) {
    mlir::Value v = arg < operands ? fusion.getInputs()[arg] : fusion.getResults()[arg - operands];
    sizes.push_back(shapeOf(v.getType())[dim]);
  }
  return sizes;
}

/// Parameter `p` (a size, stride or scalar) for a launch of `fusion`.
void *valueParam(const KernelParam &p, ir::FusionOp fusion, const codegen::KernelGeneralization &generic,
                 ValueParams &values) {
  if (p.role == KernelParam::Role::Size) {
    values.ints.push_back(classSizes(fusion, generic).at(p.index));
    return &values.ints.back();
  }
  if (p.role == KernelParam::Role::Stride) {
    values.ints.push_back(codegen::operandStrides(fusion)[p.index][p.dim]);
    return &values.ints.back();
  }
  const double scalar = codegen::scalarArguments(fusion, generic).at(p.index);
  if (p.ctype == "float") {
    values.floats.push_back(static_cast<float>(scalar));
    return &values.floats.back();
  }
  values.doubles.push_back(scalar);
  return &values.doubles.back();
}

} // namespace

SimOutcome runOnSim(const EmittedKernel &kernel, ir::FusionOp fusion, const std::vector<HostTensor> &args,
                    const codegen::KernelGeneralization *generic, uint32_t grid_override) {
  SimOutcome out;
  if (std::string why = checkArgs(fusion, args); !why.empty()) {
    out.error = why;
    return out;
  }
  SimBuffers buffers;
  for (auto [a, t] : llvm::enumerate(args)) {
    buffers.args.push_back(sim::allocate(t.bytes.size(), "arg" + std::to_string(a)));
    std::memcpy(buffers.args.back(), t.bytes.data(), t.bytes.size());
  }
  for (auto [j, r] : llvm::enumerate(fusion.getResults())) {
    out.results.push_back(zeros(dtypeOfType(r.getType()), shapeOf(r.getType())));
    buffers.results.push_back(sim::allocate(out.results.back().bytes.size(), "out" + std::to_string(j)));
  }
  const size_t checks = codegen::indexChecks(fusion).size();
  for (size_t s = 0; s < checks; ++s) {
    buffers.statuses.push_back(sim::allocate(2 * sizeof(long long), "status" + std::to_string(s)));
    static_cast<long long *>(buffers.statuses.back())[0] = -1;
    static_cast<long long *>(buffers.statuses.back())[1] = -1;
  }
  // cuLaunchKernel's convention: args[i] points at parameter i's value.
  std::vector<void *> pointers;
  pointers.reserve(kernel.params.size());
  ValueParams values;
  values.ints.reserve(kernel.params.size());
  values.floats.reserve(kernel.params.size());
  values.doubles.reserve(kernel.params.size());
  std::vector<void *> launchArgs;
  for (const KernelParam &p : kernel.params) {
    if (p.role == KernelParam::Role::Operand)
      pointers.push_back(buffers.args[rootArgument(fusion, p.index)]);
    else if (p.role == KernelParam::Role::Result)
      pointers.push_back(buffers.results[p.index]);
    else if (p.role == KernelParam::Role::IndexStatus)
      pointers.push_back(buffers.statuses[p.index]);
    else {
      launchArgs.push_back(valueParam(p, fusion, *generic, values));
      continue;
    }
    launchArgs.push_back(&pointers.back());
  }
  try {
    sim::HostKernel k = sim::load_module(codegen::cuda::cudaPrelude() + kernel.source)->kernel(kernel.name);
    const std::vector<int64_t> sizes = generic ? classSizes(fusion, *generic) : std::vector<int64_t>{};
    const auto grid = grid_override ? grid_override : static_cast<uint32_t>(kernel.launch.gridBlocks(sizes));
    const auto block = static_cast<uint32_t>(kernel.launch.block_threads);
    sim::launch(k, {grid}, {block}, kernel.launch.dynamic_shared_bytes, launchArgs.data());
  } catch (const std::exception &e) {
    out.error = e.what();
    return out;
  }
  for (size_t j = 0; j < out.results.size(); ++j)
    std::memcpy(out.results[j].bytes.data(), buffers.results[j], out.results[j].bytes.size());
  for (void *s : buffers.statuses)
    out.statuses.push_back({static_cast<long long *>(s)[0], static_cast<long long *>(s)[1]});
  return out;
}

// ---- the CPU target ----

namespace {

runtime::TensorView cpuTensor(const HostTensor &t) {
  runtime::TensorView v;
  v.buffer = runtime::Buffer::make(std::max<size_t>(t.bytes.size(), 1));
  std::memcpy(v.buffer->data(), t.bytes.data(), t.bytes.size());
  v.sizes = t.shape;
  v.strides = runtime::contiguous_strides(t.shape);
  v.dtype = t.dtype;
  return v;
}

/// The CPU target's packed kernel for `fusion`, and the library that holds it.
std::shared_ptr<codegen::KernelLibrary> compileOnCpu(ir::FusionOp fusion, runtime::PackedKernel *fn,
                                                     std::string *error) {
  std::shared_ptr<const codegen::Target> target = codegen::cpuTarget();
  mlir::MLIRContext *context = fusion->getContext();
  mlir::DialectRegistry registry;
  target->registerDialects(registry);
  context->appendDialectRegistry(registry);
  context->loadAllAvailableDialects();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> kernels = mlir::ModuleOp::create(mlir::UnknownLoc::get(context));
  if (mlir::failed(target->emitKernel(fusion, *kernels, "kiln_cpu_reference"))) {
    *error = "cpu emitKernel failed: " + diagnostics;
    return nullptr;
  }
  codegen::KernelCompileTimes times;
  auto library = target->compileKernels(*kernels, {"kiln_cpu_reference"}, "", false, &times, error);
  if (!library) {
    *error += diagnostics;
    return nullptr;
  }
  *fn = library->lookup("kiln_cpu_reference", error);
  return *fn ? library : nullptr;
}

} // namespace

SimOutcome runOnCpu(ir::FusionOp fusion, const std::vector<HostTensor> &args) {
  SimOutcome out;
  if (std::string why = checkArgs(fusion, args); !why.empty()) {
    out.error = why;
    return out;
  }
  runtime::PackedKernel fn = nullptr;
  std::shared_ptr<codegen::KernelLibrary> library = compileOnCpu(fusion, &fn, &out.error);
  if (!library)
    return out;
  std::vector<runtime::TensorView> roots, operands, results;
  for (const HostTensor &t : args)
    roots.push_back(cpuTensor(t));
  const std::vector<std::vector<int64_t>> strides = codegen::operandStrides(fusion);
  for (unsigned i = 0; i < fusion.getInputs().size(); ++i) {
    runtime::TensorView v = roots[rootArgument(fusion, i)];
    v.sizes = shapeOf(fusion.getInputs()[i].getType());
    v.strides = strides[i];
    operands.push_back(v);
  }
  for (mlir::Value r : fusion.getResults())
    results.push_back(cpuTensor(zeros(dtypeOfType(r.getType()), shapeOf(r.getType()))));
  const size_t checks = codegen::indexChecks(fusion).size();
  for (size_t s = 0; s < checks; ++s)
    results.push_back(cpuTensor(filled(DType::Int64, {2}, [](int64_t) { return -1; })));
  runtime::KernelArgs launch;
  for (const auto &v : operands)
    launch.operands.push_back(&v);
  for (const auto &v : results)
    launch.results.push_back(&v);
  runtime::cpu::launch_kernel(runtime::KernelHandle::cpu(fn), launch);
  for (size_t j = 0; j < results.size(); ++j) {
    HostTensor t = zeros(results[j].dtype, results[j].sizes);
    std::memcpy(t.bytes.data(), results[j].data(), t.bytes.size());
    if (j < fusion.getResults().size())
      out.results.push_back(std::move(t));
    else
      out.statuses.push_back({static_cast<long long>(t.at(0)), static_cast<long long>(t.at(1))});
  }
  return out;
}

// ---- comparisons ----

namespace {

bool sameSpecial(double a, double b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b))
    return a == b;
  return true;
}

double rmseOver(const HostTensor &ref, const HostTensor &v) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    if (!std::isfinite(ref.at(i)))
      continue;
    const double d = ref.at(i) - v.at(i);
    sum += d * d;
    ++n;
  }
  return n ? std::sqrt(sum / n) : 0;
}

} // namespace

std::string compareLikeFuzzer(const HostTensor &sim, const HostTensor &cpu, const HostTensor *ref) {
  if (sim.shape != cpu.shape || sim.dtype != cpu.dtype)
    return "shape or dtype differ";
  std::ostringstream why;
  if (!isFloat(sim.dtype)) {
    for (int64_t i = 0; i < sim.numel(); ++i)
      if (sim.at(i) != cpu.at(i)) {
        why << "element " << i << ": simulator " << sim.at(i) << ", cpu " << cpu.at(i);
        return why.str();
      }
    return "";
  }
  const bool sixteen = sim.dtype == DType::Float16 || sim.dtype == DType::BFloat16;
  const double tol = sixteen ? 1e-2 : 1e-4;
  int64_t worst = -1;
  for (int64_t i = 0; i < sim.numel(); ++i) {
    const double s = sim.at(i), c = cpu.at(i);
    if (!sameSpecial(s, c)) {
      why << "element " << i << ": simulator " << s << ", cpu " << c << " (NaN/Inf at different places)";
      return why.str();
    }
    if (std::isfinite(s) && std::abs(s - c) > tol + tol * std::abs(c))
      worst = worst < 0 || std::abs(s - c) > std::abs(sim.at(worst) - cpu.at(worst)) ? i : worst;
  }
  if (worst < 0)
    return "";
  why.precision(9);
  why << "not allclose at tol " << tol << ": worst element " << worst << " simulator " << sim.at(worst) << ", cpu "
      << cpu.at(worst);
  if (!ref)
    return why.str() + " (no float64 reference)";
  const double m = sixteen || sim.numel() < 1000 ? 3.0 : 2.0;
  const double rs = rmseOver(*ref, sim), rc = rmseOver(*ref, cpu);
  if (rs <= m * rc + tol / 10)
    return "";
  why << "; rmse vs float64: simulator " << rs << ", cpu " << rc;
  return why.str();
}

std::string compareBits(const HostTensor &sim, const HostTensor &cpu) {
  if (sim.bytes == cpu.bytes)
    return "";
  const size_t item = itemsize(sim.dtype);
  for (size_t i = 0; i < sim.bytes.size(); ++i)
    if (sim.bytes[i] != cpu.bytes[i]) {
      std::ostringstream why;
      why.precision(17);
      why << "element " << i / item << ": simulator " << sim.at(i / item) << ", cpu " << cpu.at(i / item)
          << " (bits differ)";
      return why.str();
    }
  return "sizes differ";
}

std::string toFloat64(const std::string &text) {
  static const std::regex floatType(R"(([x<])(bf16|f16|f32)>)");
  return std::regex_replace(text, floatType, "$1f64>");
}

std::vector<HostTensor> argsToFloat64(const std::vector<HostTensor> &args) {
  std::vector<HostTensor> out;
  for (const HostTensor &t : args)
    out.push_back(isFloat(t.dtype) ? filled(DType::Float64, t.shape, [&t](int64_t i) { return t.at(i); }) : t);
  return out;
}

} // namespace kiln::test

// ---- one case ----

namespace kiln::test {

namespace {

/// The emitted kernel of fusion `index` of `f` (generic: row-split).
codegen::cuda::EmittedKernel emitFor(Fused &f, size_t index, bool generic, codegen::KernelGeneralization *g) {
  ir::FusionOp fusion = f.fusions[index];
  if (generic)
    *g = codegen::rowSplitGeneralization(fusion);
  std::string error;
  auto k = codegen::cuda::emitCudaKernel(fusion, generic ? g : nullptr, "", &error);
  EXPECT_TRUE(mlir::succeeded(k)) << error;
  return mlir::succeeded(k) ? *k : codegen::cuda::EmittedKernel{};
}

/// The float64 result `j` of `text` on the CPU target (the fuzzer's oracle), or nothing.
std::optional<HostTensor> float64Result(const std::string &text, size_t index, const std::vector<HostTensor> &args,
                                        size_t j) {
  std::unique_ptr<Fused> f = fuse(toFloat64(text));
  if (!f || f->fusions.size() <= index)
    return std::nullopt;
  SimOutcome r = runOnCpu(f->fusions[index], argsToFloat64(args));
  if (!r.error.empty() || r.results.size() <= j)
    return std::nullopt;
  return r.results[j];
}

/// The kernel of `run` launched on `blocks` blocks gives the same bits.
void expectSameOnGrid(const SimCaseRun &run, ir::FusionOp fusion, const codegen::KernelGeneralization *generic,
                      uint32_t blocks) {
  SimOutcome small = runOnSim(run.kernel, fusion, run.args, generic, blocks);
  EXPECT_EQ(small.error, "") << "on " << blocks << " blocks";
  if (!small.error.empty())
    return;
  for (size_t j = 0; j < small.results.size(); ++j)
    EXPECT_EQ(compareBits(small.results[j], run.sim.results[j]), "")
        << "result " << j << " on " << blocks << " blocks, not the rule's grid\n"
        << (std::getenv("KILN_PRINT_CUDA") ? run.kernel.source : std::string());
  EXPECT_EQ(small.statuses, run.sim.statuses) << "on " << blocks << " blocks";
}

} // namespace

SimCaseRun runSimCase(const std::string &text, const SimCase &c) {
  SimCaseRun run;
  std::unique_ptr<Fused> f = fuse(text);
  EXPECT_TRUE(f && f->fusions.size() > c.fusion) << "parse/fuse failed:\n" << text;
  if (!f || f->fusions.size() <= c.fusion)
    return run;
  ir::FusionOp fusion = f->fusions[c.fusion];
  codegen::KernelGeneralization generic;
  std::unique_ptr<Fused> other = c.kernel_text.empty() ? nullptr : fuse(c.kernel_text);
  run.kernel = emitFor(other ? *other : *f, c.fusion, c.generic, &generic);
  if (c.generic)
    generic = codegen::rowSplitGeneralization(fusion); // this size's sources (the same structure)
  if (run.kernel.source.empty())
    return run;
  run.args = defaultArgs(fusion, c.seed);
  if (c.edit)
    c.edit(run.args);
  run.sim = runOnSim(run.kernel, fusion, run.args, c.generic ? &generic : nullptr);
  run.cpu = runOnCpu(fusion, run.args);
  EXPECT_EQ(run.sim.error, "") << run.kernel.source;
  EXPECT_EQ(run.cpu.error, "");
  if (!run.sim.error.empty() || !run.cpu.error.empty())
    return run;
  for (size_t j = 0; j < run.sim.results.size(); ++j) {
    const HostTensor &s = run.sim.results[j], &cpu = run.cpu.results[j];
    std::string why = c.bits ? compareBits(s, cpu) : compareLikeFuzzer(s, cpu, nullptr);
    if (!why.empty() && !c.bits) {
      std::optional<HostTensor> ref = float64Result(text, c.fusion, run.args, j);
      why = compareLikeFuzzer(s, cpu, ref ? &*ref : nullptr);
    }
    EXPECT_EQ(why, "") << "result " << j << " of " << run.kernel.name << " ("
                       << codegen::cuda::kindName(run.kernel.launch.kind) << ")\n"
                       << (std::getenv("KILN_PRINT_CUDA") ? run.kernel.source : std::string());
  }
  EXPECT_EQ(run.sim.statuses, run.cpu.statuses);
  const std::vector<int64_t> sizes = c.generic ? classSizes(fusion, generic) : std::vector<int64_t>{};
  if (c.small_grid && run.kernel.launch.gridBlocks(sizes) > c.small_grid)
    expectSameOnGrid(run, fusion, c.generic ? &generic : nullptr, c.small_grid);
  return run;
}

std::string substitute(std::string text, const std::vector<std::pair<std::string, std::string>> &values) {
  for (const auto &[name, value] : values) {
    const std::string key = "@" + name + "@";
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  }
  return text;
}

} // namespace kiln::test
