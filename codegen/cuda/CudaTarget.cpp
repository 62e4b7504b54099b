// The CUDA target (kiln/codegen/Target.h): every kiln.fusion of a compiled
// graph printed as CUDA C by the emitter (EmitCuda.h), the graph's distinct
// kernels compiled as ONE translation unit by the device (NVRTC for the
// GPU's architecture, or the host compiler for the CUDA-on-CPU simulator;
// both cache by source hash, runtime/README.md) and launched by
// CudaBackend::launch with the emitter's LaunchRule (runtime's
// CompiledKernel). GEMMs, convolutions and pooling are the device backend's
// (cuBLASLt / the simulator's CPU fallback), through the target-neutral
// executable builder, as are the memory plan and the in-place pairs.
//
// A kernel function in the target's kernel module is an external
// `func.func private @name()` whose attributes hold everything the launch
// needs (so the dedup and the kernel cache key see it all):
//   kiln.cuda.source   the kernel's CUDA C (after cudaPrelude())
//   kiln.cuda.params   per parameter (KernelArgSource kind, index, dim)
//   kiln.cuda.launch   LaunchRule: kind, block, static work, work per block, max blocks, dynamic shared bytes
//   kiln.cuda.classes  LaunchRule::work_classes
//   kiln.cuda.sizes    per size class (argument over operands then results, dim)
#include "kiln/codegen/CudaTarget.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include "EmitCuda.h"
#include "GemmEpilogue.h"
#include "GeneralizeKernel.h"
#include "KernelAbi.h"
#include "kiln/codegen/Target.h"
#include "kiln/runtime/cuda/CompiledKernel.h"
#include "kiln/runtime/cuda/CudaBackend.h"

namespace kiln::codegen::cuda {

namespace {

using namespace mlir;
using runtime::cuda::KernelArgSource;

/// Bump when the attributes, the manifest or the launch ABI change.
constexpr const char *kCudaTargetDescription = "cuda;target=v2;emitter=EmitCuda";

/// An H200's speeds for kiln-remat's time model (ARCHITECTURE.md): HBM3e
/// 4.8 TB/s; f32 GEMMs without tensor cores ~67 TFLOP/s (TF32 is off by
/// default, as PyTorch's float32 matmul precision "highest").
constexpr double kH200BytesPerSecond = 4.8e12;
constexpr double kH200F32FlopsPerSecond = 67e12;

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

/// What the launch of one kernel needs, read back from its attributes.
struct KernelSpec {
  std::string name;
  std::vector<int64_t> params; ///< (kind, index, dim) per parameter
  std::vector<int64_t> launch; ///< kind, block, static work, work per block, max blocks, dynamic shared bytes
  std::vector<int64_t> classes;
  std::vector<int64_t> sizes; ///< (argument, dim) per size class
};

LaunchRule ruleOf(const KernelSpec &spec) {
  LaunchRule rule;
  rule.kind = static_cast<KernelKind>(spec.launch[0]);
  rule.block_threads = spec.launch[1];
  rule.static_work = spec.launch[2];
  rule.work_per_block = spec.launch[3];
  rule.max_blocks = spec.launch[4];
  rule.dynamic_shared_bytes = spec.launch[5];
  for (int64_t c : spec.classes)
    rule.work_classes.push_back(static_cast<int>(c));
  return rule;
}

/// The runtime parameter list of `kernel` (index-check status words are
/// results after the fusion's own).
std::vector<int64_t> paramTriples(const EmittedKernel &kernel, unsigned numResults) {
  std::vector<int64_t> out;
  for (const KernelParam &p : kernel.params) {
    KernelArgSource::Kind kind = KernelArgSource::Kind::Operand;
    int64_t index = p.index;
    switch (p.role) {
    case KernelParam::Role::Operand:
      kind = KernelArgSource::Kind::Operand;
      break;
    case KernelParam::Role::Result:
      kind = KernelArgSource::Kind::Result;
      break;
    case KernelParam::Role::IndexStatus:
      kind = KernelArgSource::Kind::Result;
      index = numResults + p.index;
      break;
    case KernelParam::Role::Size:
      kind = KernelArgSource::Kind::Size;
      break;
    case KernelParam::Role::Stride:
      kind = KernelArgSource::Kind::Stride;
      break;
    case KernelParam::Role::Scalar:
      kind = p.ctype == "double" ? KernelArgSource::Kind::Float64 : KernelArgSource::Kind::Float32;
      break;
    }
    out.insert(out.end(), {static_cast<int64_t>(kind), index, p.dim});
  }
  return out;
}

/// Prints `fusion` and appends its kernel function to `kernels`.
LogicalResult appendKernel(ir::FusionOp fusion, const KernelGeneralization *generic, StringRef name,
                           ModuleOp kernels) {
  const StringRef symbol = name.empty() ? fusion.getKernel() : name;
  std::string why;
  FailureOr<EmittedKernel> kernel = emitCudaKernel(fusion, generic, symbol, &why);
  if (failed(kernel))
    return fusion.emitOpError(why);
  if (kernel->launch.workspace_bytes != 0)
    return fusion.emitOpError("cuda target: kernel ") << symbol << " needs a workspace of "
                                                      << kernel->launch.workspace_bytes
                                                      << " bytes, which compiled launches do not pass yet";
  OpBuilder b(kernels.getContext());
  b.setInsertionPointToEnd(kernels.getBody());
  auto func = b.create<func::FuncOp>(fusion.getLoc(), symbol, b.getFunctionType({}, {}));
  func.setPrivate();
  const LaunchRule &rule = kernel->launch;
  std::vector<int64_t> classes(rule.work_classes.begin(), rule.work_classes.end()), sizes;
  if (generic)
    for (auto [arg, dim] : generic->sources)
      sizes.insert(sizes.end(), {arg, dim});
  func->setAttr("kiln.cuda.source", b.getStringAttr(kernel->source));
  func->setAttr("kiln.cuda.params", b.getDenseI64ArrayAttr(paramTriples(*kernel, fusion.getNumResults())));
  func->setAttr("kiln.cuda.launch",
                b.getDenseI64ArrayAttr({static_cast<int64_t>(rule.kind), rule.block_threads, rule.static_work,
                                        rule.work_per_block, rule.max_blocks, rule.dynamic_shared_bytes}));
  func->setAttr("kiln.cuda.classes", b.getDenseI64ArrayAttr(classes));
  func->setAttr("kiln.cuda.sizes", b.getDenseI64ArrayAttr(sizes));
  return success();
}

FailureOr<KernelSpec> specOf(func::FuncOp func, std::string *source, std::string *error) {
  auto text = func->getAttrOfType<StringAttr>("kiln.cuda.source");
  auto params = func->getAttrOfType<DenseI64ArrayAttr>("kiln.cuda.params");
  auto launch = func->getAttrOfType<DenseI64ArrayAttr>("kiln.cuda.launch");
  auto classes = func->getAttrOfType<DenseI64ArrayAttr>("kiln.cuda.classes");
  auto sizes = func->getAttrOfType<DenseI64ArrayAttr>("kiln.cuda.sizes");
  if (!text || !params || !launch || launch.size() != 6 || !classes || !sizes) {
    *error = "cuda target: kernel " + func.getSymName().str() + " was not emitted by the CUDA target";
    return failure();
  }
  *source = text.getValue().str();
  auto vec = [](DenseI64ArrayAttr a) { return std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end()); };
  return KernelSpec{func.getSymName().str(), vec(params), vec(launch), vec(classes), vec(sizes)};
}

// ---- the manifest: what the kernel cache stores ------------------------------
// "KILNCUDA2\n", the kernel count, per kernel its name, four integer lists
// (count, values) and its source's length and bytes (the kernel alone,
// without the prelude, which the target's cache key holds).

void writeList(std::ostream &os, const std::vector<int64_t> &v) {
  os << v.size();
  for (int64_t x : v)
    os << ' ' << x;
  os << '\n';
}

bool readList(std::istream &is, std::vector<int64_t> *v) {
  size_t n = 0;
  if (!(is >> n) || n > (1u << 20))
    return false;
  v->resize(n);
  for (int64_t &x : *v)
    if (!(is >> x))
      return false;
  return true;
}

std::string writeManifest(const std::vector<KernelSpec> &specs, const std::vector<std::string> &sources) {
  std::ostringstream os;
  os << "KILNCUDA2\n" << specs.size() << '\n';
  for (size_t k = 0; k < specs.size(); ++k) {
    const KernelSpec &s = specs[k];
    os << s.name << '\n';
    writeList(os, s.params);
    writeList(os, s.launch);
    writeList(os, s.classes);
    writeList(os, s.sizes);
    os << sources[k].size() << '\n' << sources[k];
  }
  return os.str();
}

bool readManifest(const std::string &bytes, std::vector<KernelSpec> *specs, std::vector<std::string> *sources) {
  std::istringstream is(bytes);
  std::string magic;
  size_t n = 0;
  if (!(is >> magic) || magic != "KILNCUDA2" || !(is >> n) || n > (1u << 16))
    return false;
  specs->resize(n);
  sources->resize(n);
  for (size_t k = 0; k < n; ++k) {
    KernelSpec &s = (*specs)[k];
    if (!(is >> s.name) || !readList(is, &s.params) || !readList(is, &s.launch) || s.launch.size() != 6 ||
        !readList(is, &s.classes) || !readList(is, &s.sizes) || s.params.size() % 3 != 0 || s.sizes.size() % 2 != 0)
      return false;
    size_t length = 0;
    if (!(is >> length) || is.get() != '\n' || length > bytes.size())
      return false;
    std::string &source = (*sources)[k];
    source.resize(length);
    if (length != 0 &&
        !(is.read(source.data(), static_cast<std::streamsize>(length)) && is.gcount() == static_cast<std::streamsize>(length)))
      return false;
  }
  return true;
}

/// How many translation units a graph's `n` kernels are split into:
/// KILN_CUDA_TUS when set (1 = the whole graph as one TU), else one per
/// thread that compiles them (hardware_concurrency), with at least
/// kMinKernelsPerTu kernels in each (README: "Translation units"). Each
/// NVRTC program pays a fixed ~45 ms here (an empty program's compile), so
/// more units than threads only add that cost: the GPT training graph's 23
/// kernels compile in 0.84 s as 2 units on 2 cores and 0.94-1.14 s as 6
/// (bench/README.md, kiln-bench-nvrtc).
constexpr size_t kMinKernelsPerTu = 4;
size_t translationUnits(size_t n) {
  if (n == 0)
    return 0;
  size_t tus = std::min<size_t>((n + kMinKernelsPerTu - 1) / kMinKernelsPerTu,
                                std::max(1u, std::thread::hardware_concurrency()));
  if (const char *v = std::getenv("KILN_CUDA_TUS"))
    if (long x = std::strtol(v, nullptr, 10); x > 0)
      tus = static_cast<size_t>(x);
  return std::min(tus, n);
}

/// Contiguous groups of kernels of about equal source length (deterministic:
/// the same kernels give the same TUs, hence the same NVRTC cache keys).
std::vector<std::pair<size_t, size_t>> groupKernels(const std::vector<std::string> &sources) {
  const size_t n = sources.size(), tus = translationUnits(n);
  std::vector<std::pair<size_t, size_t>> groups;
  size_t total = 0;
  for (const std::string &s : sources)
    total += s.size();
  size_t begin = 0, done = 0;
  for (size_t g = 0; g < tus; ++g) {
    const size_t left = tus - g;
    const size_t target = (total - done + left - 1) / left;
    size_t end = begin, bytes = 0;
    while (end < n && (end == begin || bytes + sources[end].size() / 2 <= target) && n - end > left - 1) {
      bytes += sources[end].size();
      ++end;
    }
    if (g + 1 == tus)
      while (end < n)
        bytes += sources[end++].size();
    groups.emplace_back(begin, end);
    done += bytes;
    begin = end;
  }
  return groups;
}

// ---- the library -------------------------------------------------------------

/// A graph's kernels: several CudaModules (translation units of a few
/// kernels each, the prelude once per unit, compiled in parallel; one
/// compile per device each) and each kernel's launch data.
class CudaKernelLibrary final : public KernelLibrary {
public:
  CudaKernelLibrary(std::vector<KernelSpec> specs, const std::vector<std::string> &sources)
      : specs_(std::move(specs)) {
    manifest_ = writeManifest(specs_, sources);
    where_.resize(specs_.size());
    const std::string prelude = cudaPrelude();
    for (auto [begin, end] : groupKernels(sources)) {
      std::string code = prelude;
      std::vector<std::string> names;
      for (size_t k = begin; k < end; ++k) {
        code += sources[k];
        where_[k] = {modules_.size(), names.size()};
        names.push_back(specs_[k].name);
      }
      modules_.push_back(std::make_shared<runtime::cuda::CudaModule>(std::move(code), std::move(names)));
    }
    for (size_t k = 0; k < specs_.size(); ++k)
      index_[specs_[k].name] = k;
  }

  /// Compiles and loads every module on CUDA device 0 now, on up to
  /// hardware_concurrency threads (so a kernel that does not compile fails
  /// the compile, and its time is the compile's); other devices load them
  /// on their first launch.
  bool load(std::string *error) const {
    runtime::cuda::DeviceApi *api = runtime::cuda::device_api(0);
    if (!api) {
      *error = "cuda target: no CUDA device to compile for (" +
               runtime::backend_unavailable_reason(DeviceType::CUDA) + ")";
      return false;
    }
    std::vector<std::string> errors(modules_.size());
    auto loadOne = [&](size_t m) {
      try {
        if (!modules_[m]->kernel_names().empty())
          modules_[m]->function(*api, 0, 0);
      } catch (const std::exception &e) {
        errors[m] = e.what();
      }
    };
    const size_t threads =
        std::min<size_t>(modules_.size(), std::max(1u, std::thread::hardware_concurrency()));
    if (threads <= 1) {
      for (size_t m = 0; m < modules_.size(); ++m)
        loadOne(m);
    } else {
      std::atomic<size_t> next{0};
      std::vector<std::thread> pool;
      for (size_t t = 0; t < threads; ++t)
        pool.emplace_back([&] {
          for (size_t m = next++; m < modules_.size(); m = next++)
            loadOne(m);
        });
      for (std::thread &t : pool)
        t.join();
    }
    for (const std::string &e : errors)
      if (!e.empty()) { // the first failure in module order
        *error = std::string("cuda target: compiling the graph's kernels failed: ") + e;
        return false;
      }
    return true;
  }

  runtime::PackedKernel lookup(const std::string &name, std::string *error) const override {
    *error = "cuda target: kernel " + name + " is a CUDA kernel, not a host function (use handle())";
    return nullptr;
  }
  bool dumpObject(const std::string &path, std::string *error) const override {
    std::ofstream os(path, std::ios::binary | std::ios::trunc);
    os.write(manifest_.data(), static_cast<std::streamsize>(manifest_.size()));
    if (!os) {
      *error = "cuda target: cannot write " + path;
      return false;
    }
    return true;
  }
  runtime::KernelHandle handle(const std::string &name, const std::vector<std::pair<DType, double>> &scalars,
                               bool, std::string *error) const override {
    auto it = index_.find(name);
    if (it == index_.end()) {
      *error = "cuda target: no kernel " + name + " in the graph's module";
      return {};
    }
    const KernelSpec &spec = specs_[it->second];
    auto kernel = std::make_shared<runtime::cuda::CompiledKernel>();
    kernel->module = modules_[where_[it->second].first];
    kernel->index = where_[it->second].second;
    size_t scalar = 0;
    for (size_t p = 0; p + 2 < spec.params.size(); p += 3) {
      KernelArgSource a;
      a.kind = static_cast<KernelArgSource::Kind>(spec.params[p]);
      a.index = static_cast<int>(spec.params[p + 1]);
      a.dim = static_cast<int>(spec.params[p + 2]);
      if (a.kind == KernelArgSource::Kind::Float32 || a.kind == KernelArgSource::Kind::Float64) {
        if (scalar >= scalars.size()) {
          *error = "cuda target: kernel " + name + " takes more run-time scalars than the " +
                   std::to_string(scalars.size()) + " bound";
          return {};
        }
        a.value = scalars[scalar++].second;
      }
      kernel->params.push_back(a);
    }
    if (scalar != scalars.size()) {
      *error = "cuda target: kernel " + name + " takes " + std::to_string(scalar) + " run-time scalars, got " +
               std::to_string(scalars.size());
      return {};
    }
    for (size_t s = 0; s + 1 < spec.sizes.size(); s += 2)
      kernel->size_sources.emplace_back(static_cast<int>(spec.sizes[s]), static_cast<int>(spec.sizes[s + 1]));
    const LaunchRule rule = ruleOf(spec);
    kernel->grid_blocks = [rule](const std::vector<int64_t> &classes) { return rule.gridBlocks(classes); };
    kernel->grid_rule = runtime::cuda::GridRule{rule.static_work, rule.work_per_block, rule.max_blocks,
                                                rule.work_classes};
    kernel->block_threads = static_cast<uint32_t>(rule.block_threads);
    kernel->dynamic_shared_bytes = static_cast<size_t>(rule.dynamic_shared_bytes);
    return runtime::KernelHandle{nullptr, false, kernel};
  }
  bool bindsScalars() const override { return true; }
  bool launchFacts(const std::string &symbol, LaunchFacts *out) const override {
    auto it = index_.find(symbol);
    if (it == index_.end())
      return false;
    const LaunchRule rule = ruleOf(specs_[it->second]);
    out->kind = kindName(rule.kind);
    out->block_threads = rule.block_threads;
    out->grid_blocks = rule.work_classes.empty() ? rule.gridBlocks({}) : -1;
    out->dynamic_shared_bytes = rule.dynamic_shared_bytes;
    return true;
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> sourceUnits() const override {
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    for (const auto &m : modules_)
      out.emplace_back(m->source(), m->kernel_names());
    return out;
  }

private:
  std::vector<KernelSpec> specs_;
  std::map<std::string, size_t> index_;
  std::string manifest_;
  std::vector<std::shared_ptr<runtime::cuda::CudaModule>> modules_;
  std::vector<std::pair<size_t, size_t>> where_; ///< per kernel: (module, index in it)
};

/// The process's compiled-graph CUDA modules while recording is on, oldest
/// first (for tests and benchmarks: recordGraphSources).
std::mutex g_sources_mu;
std::vector<CompiledGraphSource> g_sources;
size_t g_graphs = 0;
bool g_record_sources = false;

class CudaTarget final : public Target {
public:
  std::string name() const override { return "cuda"; }
  void registerDialects(DialectRegistry &) const override {} // func is a kiln dialect dependency
  LogicalResult emitKernel(ir::FusionOp fusion, ModuleOp kernels, StringRef name) const override {
    return appendKernel(fusion, nullptr, name, kernels);
  }
  LogicalResult emitGenericKernel(ir::FusionOp fusion, const KernelGeneralization &generic, StringRef name,
                                  ModuleOp kernels) const override {
    return appendKernel(fusion, &generic, name, kernels);
  }
  std::string cacheKeyPrefix(MLIRContext *) const override {
    return std::string(kCudaTargetDescription) + "|" + cudaPrelude();
  }
  std::shared_ptr<KernelLibrary> compileKernels(ModuleOp kernels, const std::vector<std::string> &names,
                                                const std::string &dump_dir, bool, KernelCompileTimes *times,
                                                std::string *error) const override {
    auto start = Clock::now();
    std::vector<KernelSpec> specs;
    std::vector<std::string> sources;
    for (const std::string &name : names) {
      auto func = kernels.lookupSymbol<func::FuncOp>(name);
      std::string text;
      FailureOr<KernelSpec> spec = func ? specOf(func, &text, error) : FailureOr<KernelSpec>(failure());
      if (failed(spec)) {
        if (!func)
          *error = "cuda target: no kernel function " + name;
        return nullptr;
      }
      specs.push_back(std::move(*spec));
      sources.push_back(std::move(text));
    }
    if (!dump_dir.empty()) {
      std::ofstream os(dump_dir + "/codegen-0-cuda.cu");
      os << cudaPrelude();
      for (const std::string &text : sources)
        os << text;
    }
    times->lowering_seconds = secondsSince(start);
    return finish(std::move(specs), sources, times, error);
  }
  std::shared_ptr<KernelLibrary> loadKernels(const std::string &object, const std::vector<std::string> &names,
                                             std::string *error) const override {
    std::vector<KernelSpec> specs;
    std::vector<std::string> sources;
    if (!readManifest(object, &specs, &sources)) {
      *error = "cuda target: the cached manifest does not parse";
      return nullptr;
    }
    for (size_t k = 0; k < names.size(); ++k)
      if (k >= specs.size() || specs[k].name != names[k]) {
        *error = "cuda target: the cached manifest has other kernels";
        return nullptr;
      }
    KernelCompileTimes times;
    return finish(std::move(specs), sources, &times, error);
  }
  CostModel costModel() const override { return CostModel{kH200BytesPerSecond, kH200F32FlopsPerSecond}; }
  /// cuBLASLt's epilogue (the simulator applies the same math after its
  /// GEMM; CudaBackend). KILN_GEMM_EPILOGUES=0 turns the folding off (read
  /// at each compile). The GELU aux matrix has the product's layout: its
  /// leading dimension N must be divisible by 8 (cublasLt.h,
  /// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD), else no fold.
  runtime::KernelHandle gemmEpilogueKernel(GemmEpilogueKind kind, int64_t n) const override {
    const char *v = std::getenv("KILN_GEMM_EPILOGUES");
    if (v && std::string(v) == "0")
      return {};
    using runtime::cuda::GemmEpilogue;
    GemmEpilogue epilogue = GemmEpilogue::None;
    switch (kind) {
    case GemmEpilogueKind::Bias: epilogue = GemmEpilogue::Bias; break;
    case GemmEpilogueKind::BiasRelu: epilogue = GemmEpilogue::BiasRelu; break;
    case GemmEpilogueKind::BiasGelu: epilogue = GemmEpilogue::BiasGelu; break;
    case GemmEpilogueKind::BiasGeluAux: epilogue = GemmEpilogue::BiasGeluAux; break;
    case GemmEpilogueKind::Dgelu: epilogue = GemmEpilogue::Dgelu; break;
    case GemmEpilogueKind::DgeluBgrad: epilogue = GemmEpilogue::DgeluBgrad; break;
    }
    const bool aux = kind == GemmEpilogueKind::BiasGeluAux || readsGemmAux(kind);
    if (aux && n % 8 != 0)
      return {};
    auto kernel = std::make_shared<runtime::cuda::CompiledKernel>();
    kernel->gemm_epilogue = epilogue;
    return runtime::KernelHandle{nullptr, false, kernel};
  }

private:
  static std::shared_ptr<KernelLibrary> finish(std::vector<KernelSpec> specs, const std::vector<std::string> &sources,
                                               KernelCompileTimes *times, std::string *error) {
    auto start = Clock::now();
    auto library = std::make_shared<CudaKernelLibrary>(std::move(specs), sources);
    {
      std::lock_guard<std::mutex> lock(g_sources_mu);
      if (g_record_sources)
        for (auto &[source, names] : library->sourceUnits())
          g_sources.push_back(CompiledGraphSource{std::move(source), std::move(names), g_graphs});
      ++g_graphs;
    }
    if (!library->load(error))
      return nullptr;
    times->codegen_seconds = secondsSince(start);
    return library;
  }
};

} // namespace

std::string graphPrelude() { return cudaPrelude(); }

void recordGraphSources(bool on) {
  std::lock_guard<std::mutex> lock(g_sources_mu);
  g_record_sources = on;
}

std::vector<CompiledGraphSource> compiledGraphSources() {
  std::lock_guard<std::mutex> lock(g_sources_mu);
  return g_sources;
}

} // namespace kiln::codegen::cuda

namespace kiln::codegen {

std::shared_ptr<const Target> cudaTarget() {
  static const std::shared_ptr<const Target> target = std::make_shared<cuda::CudaTarget>();
  return target;
}

void registerCudaTarget() {
  static std::once_flag once;
  std::call_once(once, [] { register_target(DeviceType::CUDA, cudaTarget()); });
}

} // namespace kiln::codegen
