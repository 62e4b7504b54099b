// compile/export.cpp - kiln::export_compiled (kiln/export.h): trace and
// compile the eval forward as kiln::compile does, then write the artifact
// (runtime/src/artifact/FORMAT.md) from the executable, the kernel cache's
// object and the captured tensors.
#include "kiln/export.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <unistd.h>

#include "compile/artifact.h"
#include "kiln/codegen/KernelObject.h"
#include "kiln/ir/DynamicShapes.h"
#include "kiln/runtime/Artifact.h"
#include "kiln/runtime/LaunchExecutable.h"
#include "kiln/runtime/cuda/Nvrtc.h"
#include "kiln/serialize.h"
#include "serialize/atomic_file.h"

namespace kiln {
namespace {

/// Restores the module's training flag on scope exit.
struct EvalScope {
  nn::Module &m;
  bool was_training;
  explicit EvalScope(nn::Module &module) : m(module), was_training(module.is_training()) { m.eval(); }
  ~EvalScope() {
    if (was_training) m.train();
  }
};

/// A temporary folder removed on scope exit (when the kernel cache is off).
struct TempDir {
  std::string path;
  ~TempDir() {
    if (!path.empty()) std::system(("rm -rf '" + path + "'").c_str());
  }
};

std::string read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The state_dict names of the captured tensors (parameters and buffers by
/// identity), else "captured.<i>"; unique.
std::vector<std::string> weight_names(const nn::Module &model, const std::vector<Tensor> &captured) {
  std::map<const void *, std::string> by_impl;
  for (const auto &[name, t] : model.named_buffers()) by_impl.emplace(t.impl(), name);
  for (const auto &[name, t] : model.named_parameters()) by_impl.emplace(t.impl(), name);
  std::vector<std::string> names;
  std::map<std::string, int> used;
  for (size_t i = 0; i < captured.size(); ++i) {
    auto it = by_impl.find(captured[i].impl());
    std::string name = it != by_impl.end() ? it->second : "captured." + std::to_string(i);
    if (used[name]++) name += "#" + std::to_string(i);
    names.push_back(name);
  }
  return names;
}

runtime::artifact::Guard guard_of(const std::string &name, const runtime::TensorView &v) {
  return runtime::artifact::Guard{name, v.dtype, v.sizes};
}

/// NVRTC's CUBIN for each of `archs` and PTX for the lowest, per unit
/// (compiled through the process's NVRTC compiler and its disk cache; NVRTC's
/// output is deterministic).
void compile_cuda_units(const std::string &model, const ExportOptions &options,
                        std::vector<runtime::artifact::CudaUnit> &units) {
  namespace rc = runtime::cuda;
  KILN_CHECK(!options.cuda_archs.empty(), "kiln::export_compiled: ", model,
             ": cuda_archs is empty (expected at least one GPU architecture, e.g. \"sm_90\")");
  KILN_CHECK(rc::nvrtc_available(), "kiln::export_compiled: ", model,
             ": exporting a CUDA model compiles its kernels to CUBIN with NVRTC, which is not available (",
             rc::nvrtc_unavailable_reason(), ")");
  const std::vector<int> supported = rc::nvrtc_supported_archs();
  int lowest = 0;
  for (const std::string &arch : options.cuda_archs) {
    const std::optional<rc::CompileTarget> target = rc::parse_arch_name(arch);
    const int n = target && target->kind == rc::BinaryKind::Cubin ? target->arch : 0;
    KILN_CHECK(n > 0 && std::find(supported.begin(), supported.end(), n) != supported.end(),
               "kiln::export_compiled: ", model, ": cuda_archs has '", arch,
               "', expected an sm_XX that this NVRTC compiles (sm_", supported.empty() ? 0 : supported.front(),
               " to sm_", supported.empty() ? 0 : supported.back(), ")");
    lowest = lowest == 0 ? n : std::min(lowest, n);
  }
  rc::NvrtcCompiler &nvrtc = rc::default_nvrtc_compiler();
  for (size_t u = 0; u < units.size(); ++u) {
    runtime::artifact::CudaUnit &unit = units[u];
    rc::KernelSource source{unit.source, unit.kernel_names, "kiln_export_" + std::to_string(u) + ".cu"};
    try {
      for (const std::string &arch : options.cuda_archs)
        unit.cubins.emplace_back(arch, nvrtc.compile_for(source, *rc::parse_arch_name(arch)).binary);
      if (options.cuda_ptx) {
        const rc::CompileTarget ptx{rc::BinaryKind::Ptx, lowest};
        unit.ptx = nvrtc.compile_for(source, ptx).binary;
        unit.ptx_arch = ptx.arch_name();
      }
    } catch (const std::exception &e) {
      throw Error("kiln::export_compiled: " + model + ": NVRTC: " + e.what());
    }
  }
}

/// `x` with size `size` along `dim`: its own rows repeated or cut (the values
/// only trace; token ids stay valid).
Tensor resized(const Tensor &x, int dim, int64_t size) {
  const int64_t n = x.sizes()[static_cast<size_t>(dim)];
  if (size <= n) return x.narrow(dim, 0, size).contiguous();
  std::vector<Tensor> parts{x};
  for (int64_t have = n; have < size; have += std::min(n, size - have)) parts.push_back(x.narrow(dim, 0, std::min(n, size - have)));
  return cat(parts, dim).contiguous();
}

/// A traced eval forward of `call` (export_compiled's checks).
std::shared_ptr<CompiledModule::Artifact> trace_for_export(const detail::CallSpec &call, const nn::Module &model) {
  std::shared_ptr<CompiledModule::Artifact> artifact;
  try {
    artifact = compile_detail::trace_call(call, /*with_backward=*/false, model.name());
  } catch (const trace::GraphBreakError &e) {
    throw Error("kiln::export_compiled: " + model.name() + ": op '" + e.op +
                "' breaks the graph; an exported model must be one graph (remove the host read, e.g. item())");
  }
  KILN_CHECK(artifact->random_draws.empty(), "kiln::export_compiled: ", model.name(), " draws ",
             artifact->random_draws.size(), " random tensors in eval mode (expected none: dropout is off in eval)");
  KILN_CHECK(artifact->mutated.empty(), "kiln::export_compiled: ", model.name(), " updates ",
             artifact->mutated.size(), " buffers in place in eval mode (expected none)");
  if (const char *type = compile_detail::uncompilable_type(artifact->traced))
    throw Error(std::string("kiln::export_compiled: ") + model.name() + ": the graph has " + type +
                " values, which the compiler does not support");
  return artifact;
}

}  // namespace

ExportReport export_compiled(std::shared_ptr<nn::Module> model, const std::vector<Tensor> &example_inputs,
                             const std::string &path, const ExportOptions &options) {
  KILN_CHECK(model != nullptr, "kiln::export_compiled: the model is null");
  // kiln::compile's result runs compiled code that records no eager ops:
  // traced as it is, its output would be stored as a constant. Export the
  // module it wraps.
  while (auto *compiled = dynamic_cast<CompiledModule *>(model.get())) model = compiled->original_module();
  KILN_CHECK(!example_inputs.empty(), "kiln::export_compiled: ", model->name(),
             ": no example inputs (expected one tensor per forward input)");
  EvalScope eval(*model);
  NoGradGuard no_grad;
  detail::CallSpec call;
  call.inputs = example_inputs;
  for (size_t i = 0; i < example_inputs.size(); ++i) call.input_names.push_back("input " + std::to_string(i));
  nn::Module *m = model.get();
  if (example_inputs.size() == 1)
    call.body = [m](const std::vector<Tensor> &in) { return std::vector<Tensor>{m->forward(in[0])}; };
  else
    call.body = [m](const std::vector<Tensor> &in) { return m->forward(in); };
  const Device device = compile_detail::compile_device(call, *model);
  const bool cuda = device.type == DeviceType::CUDA;
  KILN_CHECK(device == kCPU || device == Device(DeviceType::CUDA, 0), "kiln::export_compiled: ", model->name(),
             ": inputs on ", device.str(), ", expected cpu (x86-64 object code) or cuda:0 (CUBIN, PTX and CUDA C)");
  // The dynamic dim, if any: (input, dim) and its example size s0.
  int dyn_input = -1, dyn_dim = -1;
  for (const auto &[input, dims] : options.dynamic_dims)
    for (int d : dims) {
      KILN_CHECK(dyn_input < 0, "kiln::export_compiled: ", model->name(),
                 ": dynamic_dims names more than one dim (one is supported: the compiler's dynamic shapes have one symbol)");
      KILN_CHECK(input >= 0 && input < static_cast<int>(example_inputs.size()) && d >= 0 &&
                     d < static_cast<int>(example_inputs[static_cast<size_t>(input)].dim()),
                 "kiln::export_compiled: ", model->name(), ": dynamic_dims has input ", input, " dim ", d,
                 ", which the example inputs do not have");
      dyn_input = input;
      dyn_dim = d;
    }
  const bool dynamic = dyn_input >= 0;
  const int64_t s0 = dynamic ? example_inputs[static_cast<size_t>(dyn_input)].sizes()[static_cast<size_t>(dyn_dim)] : 0;
  KILN_CHECK(!dynamic || s0 >= 2, "kiln::export_compiled: ", model->name(), ": input ", dyn_input, " dim ", dyn_dim,
             " is dynamic but its example size is ", s0, " (expected >= 2: sizes 0 and 1 are specialized)");
  std::shared_ptr<CompiledModule::Artifact> artifact = trace_for_export(call, *model);
  bool reads_an_input = false;
  for (int k = 0; k < artifact->traced.num_forward_outputs; ++k) {
    const int v = artifact->traced.outputs[static_cast<size_t>(k)];
    for (int i = 0; i < artifact->num_inputs; ++i) reads_an_input |= artifact->traced.inputs[static_cast<size_t>(i)] == v;
    bool captured = false;
    for (size_t i = static_cast<size_t>(artifact->num_inputs); i < artifact->traced.inputs.size(); ++i)
      captured |= artifact->traced.inputs[i] == v;
    reads_an_input |= !captured;
  }
  KILN_CHECK(reads_an_input, "kiln::export_compiled: ", model->name(),
             ": no output depends on the inputs (the trace recorded no Kiln op on them: a forward that computes "
             "outside Kiln's ops, or on tensors it does not take as inputs, would be exported as a constant)");

  // Compile, with the kernel cache on: its entry is the object code.
  CompileStats stats;
  codegen::CompileOptions copts = compile_detail::codegen_options(*model, options.compile, stats, device);
  TempDir temp;
  if (!cuda && codegen::resolveKernelCacheDir(copts).empty()) {
    const char *off = std::getenv("KILN_DISABLE_CACHE");
    KILN_CHECK(!(off && std::string(off) == "1"), "kiln::export_compiled: ", model->name(),
               ": KILN_DISABLE_CACHE=1 is set, but the exported object code comes from the kernel cache; unset it");
    char pattern[] = "/tmp/kiln-export-XXXXXX";
    KILN_CHECK(mkdtemp(pattern) != nullptr, "kiln::export_compiled: cannot create a temporary kernel cache folder");
    temp.path = pattern;
    copts.kernel_cache_dir = temp.path;
  }
  codegen::CompiledGraph graph;
  std::string error;
  // A dynamic export: the graph at s0 + 1 fitted against s0 (ir/DynamicShapes.h),
  // shape-generic kernels compiled once from s0 + 1 against s0 + 2 (a kernel
  // is generic against its reference size only), executables at s0 and
  // s0 + 3 bound to them; the three launch lists give the template.
  codegen::CompiledGraph graph_at[3];
  const int64_t sizes[3] = {s0, s0 + 1, s0 + 3};
  if (dynamic) {
    detail::CallSpec call1 = call;
    call1.inputs[static_cast<size_t>(dyn_input)] = resized(example_inputs[static_cast<size_t>(dyn_input)], dyn_dim, s0 + 1);
    std::shared_ptr<CompiledModule::Artifact> artifact1 = trace_for_export(call1, *model);
    ir::SymbolicGraph symbolic;
    KILN_CHECK(ir::fitSymbolicGraph(artifact1->traced, s0 + 1, artifact->traced, s0, &symbolic, &error),
               "kiln::export_compiled: ", model->name(), ": input ", dyn_input, " dim ", dyn_dim,
               " cannot be dynamic: ", error);
    for (size_t i = 0; i < artifact->captured.size(); ++i)
      KILN_CHECK(!symbolic.isDynamic(artifact1->traced.inputs[artifact1->num_inputs + i]), "kiln::export_compiled: ",
                 model->name(), ": captured tensor ", i, " has a shape that depends on input ", dyn_input, " dim ", dyn_dim);
    std::shared_ptr<const codegen::DynamicKernels> kernels;
    KILN_CHECK(codegen::compileGraphDynamic(artifact1->traced, ir::instantiate(symbolic, s0 + 2), copts, &graph_at[1],
                                            &kernels, &error),
               "kiln::export_compiled: compiling ", model->name(), " shape-generic failed: ", error);
    for (int k : {0, 2})
      KILN_CHECK(codegen::instantiateGraphDynamic(ir::instantiate(symbolic, sizes[k]), kernels, &graph_at[k], &error),
                 "kiln::export_compiled: ", model->name(), ": the shape-generic kernels do not serve size ", sizes[k],
                 ": ", error);
    graph = graph_at[0];
    graph.kernel_cache_key = graph_at[1].kernel_cache_key;
    graph.num_distinct_kernels = graph_at[1].num_distinct_kernels;
  } else {
    KILN_CHECK(codegen::compileGraph(artifact->traced, copts, &graph, &error), "kiln::export_compiled: compiling ",
               model->name(), " failed: ", error);
  }
  auto *exe = dynamic_cast<runtime::LaunchExecutable *>(graph.forward.get());
  KILN_CHECK(exe != nullptr, "kiln::export_compiled: ", model->name(), ": the forward is not a launch list");

  runtime::artifact::Contents c;
  c.kiln_version = codegen::kKilnVersion;
  c.model = model->name();
  if (cuda)
    c.target = runtime::artifact::kCudaTarget;  // no CPU object code: no CPU features needed
  else
    c.cpu_features = runtime::artifact::host_cpu_features();
  KILN_CHECK(runtime::artifact::encode_launches(*exe, &c.program, &error, cuda ? &c.cuda_units : nullptr),
             "kiln::export_compiled: ", model->name(), ": ", error);
  if (dynamic) {
    std::vector<std::string> programs{c.program, "", ""};
    for (int k : {1, 2}) {
      auto *other = dynamic_cast<runtime::LaunchExecutable *>(graph_at[k].forward.get());
      std::vector<runtime::artifact::CudaUnit> units;
      KILN_CHECK(other && runtime::artifact::encode_launches(*other, &programs[static_cast<size_t>(k)], &error,
                                                            cuda ? &units : nullptr),
                 "kiln::export_compiled: ", model->name(), ": size ", sizes[k], ": ", error);
    }
    KILN_CHECK(runtime::artifact::fit_dynamic_program(programs, {sizes[0], sizes[1], sizes[2]}, &c.program, &error),
               "kiln::export_compiled: ", model->name(), ": input ", dyn_input, " dim ", dyn_dim,
               " cannot be exported dynamic: ", error);
    c.dynamic_input = dyn_input;
    c.dynamic_dim = dyn_dim;
  }
  if (cuda) compile_cuda_units(model->name(), options, c.cuda_units);
  if (!cuda && !graph.kernel_cache_key.empty())
    KILN_CHECK(codegen::readKernelObject(graph, copts, &c.kernels, &error), "kiln::export_compiled: ",
               model->name(), ": ", error);

  // Guards: the inputs as given, the outputs from one run on them.
  std::vector<runtime::TensorView> primals;
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    primals.push_back(compile_detail::to_view(example_inputs[i].contiguous()));
    c.inputs.push_back(guard_of("input " + std::to_string(i), primals.back()));
  }
  for (const Tensor &t : artifact->captured) primals.push_back(compile_detail::to_view(t));
  std::vector<runtime::TensorView> results = exe->run(primals, &error);
  KILN_CHECK(error.empty(), "kiln::export_compiled: ", model->name(), ": running the compiled forward: ", error);
  for (int k = 0; k < graph.num_forward_outputs && k < static_cast<int>(results.size()); ++k)
    c.outputs.push_back(guard_of("output " + std::to_string(k), results[k]));

  // Weights: kiln::save's safetensors layout, read back as the section.
  c.weights = weight_names(*model, artifact->captured);
  NamedTensors named;
  ExportReport report;
  for (size_t i = 0; i < artifact->captured.size(); ++i) {
    named.emplace_back(c.weights[i], artifact->captured[i].cpu().contiguous());
    report.weight_bytes += artifact->captured[i].numel() * static_cast<int64_t>(itemsize(artifact->captured[i].dtype()));
  }
  const std::string weights_path = path + ".weights.tmp-" + std::to_string(getpid());
  save(weights_path, named);
  c.safetensors = read_bytes(weights_path);
  std::remove(weights_path.c_str());

  const std::string bytes = runtime::artifact::write_artifact(c);
  serialize::AtomicFileWriter out(path);
  out.write(bytes.data(), bytes.size());
  out.commit();
  report.bytes = static_cast<int64_t>(bytes.size());
  report.num_kernels = graph.num_distinct_kernels;
  report.num_launches = exe->num_launches();
  return report;
}

}  // namespace kiln
