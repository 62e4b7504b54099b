// kiln::compile: guard -> (trace -> compile) -> run the compiled forward, with
// a grad_fn that runs the compiled backward.
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/codegen/Compiler.h"
#include "kiln/compile.h"
#include "kiln/ops.h"
#include "kiln/random.h"
#include "kiln/runtime/Profiler.h"
#include "compile/tracer.h"

namespace kiln {

/// One compiled graph and how to bind it.
struct CompiledModule::Artifact {
  codegen::CompiledGraph graph;
  std::vector<Tensor> captured;     ///< bound by reference each call (parameters)
  std::vector<std::function<Tensor()>> random_draws;  ///< redrawn each call (dropout masks)
  std::vector<int> grad_inputs;     ///< primal positions that receive gradients
  std::vector<DType> output_types;  ///< forward outputs
};

namespace {

using autograd::TensorList;

runtime::TensorView to_view(const Tensor &t) {
  const TensorImpl &i = *t.impl();
  return runtime::TensorView{i.storage, i.offset, i.sizes, i.strides, i.dtype};
}

Tensor from_view(const runtime::TensorView &v) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = v.buffer;
  impl->offset = v.offset;
  impl->sizes = v.sizes;
  impl->strides = v.strides;
  impl->dtype = v.dtype;
  return Tensor(std::move(impl));
}

bool log_enabled(const char *what) {
  const char *env = std::getenv("KILN_LOG");
  return env && std::string(env).find(what) != std::string::npos;
}

/// Everything a compiled artifact specializes on; one field per guard.
struct GuardKey {
  Shape shape;
  DType dtype;
  Device device;
  bool requires_grad, training, grad_enabled;
  std::string params_requires_grad;  ///< '1'/'0' per parameter
  DType autocast = kFloat32;         ///< CompileOptions::autocast

  static GuardKey of(const Tensor &input, bool training, bool grad_enabled, const nn::Module &m, DType autocast) {
    GuardKey k{input.sizes(), input.dtype(), input.device(), input.requires_grad(), training, grad_enabled, {}, autocast};
    for (const auto &p : m.parameters()) k.params_requires_grad += p.requires_grad() ? '1' : '0';
    return k;
  }
  std::string str() const {
    std::ostringstream os;
    os << "input" << shape_str(shape) << ":" << dtype_name(dtype) << ":" << device.str() << (requires_grad ? ":rg" : "")
       << " training=" << training << " grad=" << grad_enabled << " params=" << params_requires_grad;
    if (autocast != kFloat32) os << " autocast=" << dtype_name(autocast);
    return os.str();
  }
  /// Why `this` misses an artifact compiled for `old`: the guards that differ.
  std::string diff(const GuardKey &old) const {
    std::ostringstream os;
    auto add = [&](const std::string &what) { os << (os.tellp() > 0 ? ", " : "") << what; };
    if (shape != old.shape) add("input shape " + shape_str(old.shape) + " -> " + shape_str(shape));
    if (dtype != old.dtype) add(std::string("input dtype ") + dtype_name(old.dtype) + " -> " + dtype_name(dtype));
    if (device != old.device) add("device " + old.device.str() + " -> " + device.str());
    if (requires_grad != old.requires_grad) add(requires_grad ? "input now requires grad" : "input no longer requires grad");
    if (training != old.training) add(training ? "train() mode" : "eval() mode");
    if (grad_enabled != old.grad_enabled) add(grad_enabled ? "grad mode enabled" : "under NoGradGuard");
    if (params_requires_grad != old.params_requires_grad) add("parameters' requires_grad changed");
    if (autocast != old.autocast) add(std::string("autocast ") + dtype_name(old.autocast) + " -> " + dtype_name(autocast));
    return os.str();
  }
};

/// Runs the compiled backward: (primals..., saved..., tangents...) -> grads.
struct CompiledBackward : autograd::Node {
  std::shared_ptr<CompiledModule::Artifact> artifact;
  std::vector<runtime::TensorView> primals, saved;
  std::string module_name;  ///< for profiler events
  std::vector<Shape> output_shapes;
  std::vector<DType> output_types;

  TensorList apply(const TensorList &grad_outputs) override {
    KILN_CHECK(!released, "backward: trying to backward through the compiled graph a second time; its saved tensors "
               "were freed. Pass retain_graph=true to the first backward call");
    std::vector<runtime::TensorView> args = primals;
    args.insert(args.end(), saved.begin(), saved.end());
    for (size_t i = 0; i < grad_outputs.size(); ++i) {
      Tensor g = grad_outputs[i].defined() ? grad_outputs[i] : zeros(output_shapes[i], output_types[i]);
      args.push_back(to_view(g.to(output_types[i])));
    }
    std::string error;
    runtime::Profiler &profiler = runtime::Profiler::instance();
    const double start_us = profiler.now_us();
    auto grads = artifact->graph.backward->run(args, &error);
    profiler.record("backward " + module_name, "step", start_us, profiler.now_us() - start_us);
    KILN_CHECK(error.empty(), "kiln::compile: compiled backward failed: ", error);
    TensorList out;
    for (auto &v : grads) out.push_back(from_view(v));
    return out;
  }
  std::string name() const override { return "CompiledFunctionBackward"; }
  void release_saved() override {
    saved.clear();
    released = true;
  }
  bool released = false;
};

/// Traces forward + backward of `module` on `input` and compiles the graph.
std::shared_ptr<CompiledModule::Artifact> trace_and_compile(nn::Module &module, const Tensor &input,
                                                            bool with_backward, const CompileOptions &options,
                                                            CompileStats &stats) {
  auto artifact = std::make_shared<CompiledModule::Artifact>();
  // Tracing runs the model once; random draws made while tracing must not
  // shift the generator, so the compiled call that follows sees exactly the
  // state an eager call would.
  const Generator generator_before = default_generator();
  trace::Tracer tracer;
  Tensor traced_input = input.detach();
  if (input.requires_grad() && with_backward) traced_input.requires_grad_(true);
  Tensor output;
  std::vector<Tensor> grads;
  {
    trace::TracingScope scope(&tracer);
    tracer.add_user_input(traced_input);
    output = module.forward(traced_input);
    KILN_CHECK(output.defined(), "kiln::compile: ", module.name(), ".forward returned an undefined tensor");
    if (with_backward && output.requires_grad()) {
      Tensor tangent;
      {
        trace::PauseTracing pause;
        tangent = ones_like(output);
      }
      tracer.add_tangent(tangent);
      // Gradient targets: captured leaves that require grad, then the input.
      std::vector<Tensor> targets;
      std::vector<int> positions;
      const auto &captured = tracer.captured();
      for (size_t i = 0; i < captured.size(); ++i)
        if (captured[i].requires_grad() && captured[i].is_leaf()) {
          targets.push_back(captured[i]);
          positions.push_back(static_cast<int>(i) + 1);
        }
      if (traced_input.requires_grad()) {
        targets.push_back(traced_input);
        positions.push_back(0);
      }
      if (!targets.empty()) {
        grads = autograd::grad({output}, {tangent}, targets);
        for (size_t i = 0; i < grads.size(); ++i)
          if (!grads[i].defined()) grads[i] = zeros(targets[i].sizes(), targets[i].dtype());
        artifact->grad_inputs = positions;
      }
    }
  }
  default_generator() = generator_before;
  ir::Graph graph = tracer.finish({output}, grads);
  artifact->captured = tracer.captured();
  artifact->random_draws = tracer.random_draws();
  artifact->output_types = {output.dtype()};

  codegen::CompileOptions copts;
  copts.autocast = options.autocast;
  // One folder per compiled graph: <dir>/<Module>-<n>/NN-<stage>.mlir.
  if (!options.dump_ir_dir.empty())
    copts.dump_ir_dir = options.dump_ir_dir + "/" + module.name() + "-" + std::to_string(stats.compiles);
  std::string error;
  auto start = std::chrono::steady_clock::now();
  bool ok = codegen::compileGraph(graph, copts, &artifact->graph, &error);
  stats.last_compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  KILN_CHECK(ok, "kiln::compile: compiling ", module.name(), " failed: ", error,
             "\nRun the model eagerly (without kiln::compile) to work around this, and set KILN_DUMP_IR=<dir> "
             "to see the IR.");
  stats.num_fusions = static_cast<int>(artifact->graph.fusions.size());
  stats.arena_bytes = artifact->graph.forward->arena_bytes() +
                      (artifact->graph.backward ? artifact->graph.backward->arena_bytes() : 0);
  return artifact;
}

}  // namespace

struct CompiledModule::Guard {
  GuardKey key;
};

CompiledModule::CompiledModule(std::shared_ptr<nn::Module> module, CompileOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
  KILN_CHECK(module_ != nullptr, "kiln::compile: module is null");
  if (options_.dump_ir_dir.empty())
    if (const char *env = std::getenv("KILN_DUMP_IR")) options_.dump_ir_dir = env;
  register_module("_orig_mod", module_);
  train(module_->is_training());
}

CompiledModule::~CompiledModule() = default;

Tensor CompiledModule::forward(const Tensor &input) {
  KILN_CHECK(input.defined(), "kiln::compile: ", name(), " called with an undefined input");
  KILN_CHECK(input.device().is_cpu(), "kiln::compile: input is on ", input.device().str(),
             "; the compiled CPU backend expects cpu tensors");
  const bool grad_enabled = autograd::GradMode::is_enabled();
  const GuardKey guard = GuardKey::of(input, is_training(), grad_enabled, *module_, options_.autocast);
  const std::string key = guard.str();
  auto it = cache_.find(key);
  std::shared_ptr<Artifact> artifact;
  if (it != cache_.end()) {
    artifact = it->second;
    ++stats_.cache_hits;
  } else {
    if (static_cast<int>(cache_.size()) >= options_.cache_size_limit) {
      // As torch._dynamo's cache_size_limit: stop compiling, run eagerly.
      if (!warned_cache_limit_)
        std::fprintf(stderr,
                     "[kiln] warning: %s was recompiled %d times (cache_size_limit); new inputs run eagerly. "
                     "Last miss: %s. Keep input shapes stable or raise CompileOptions::cache_size_limit\n",
                     name().c_str(), static_cast<int>(cache_.size()), guard.diff(last_guard_->key).c_str());
      warned_cache_limit_ = true;
      ++stats_.eager_fallbacks;
      return module_->forward(input);
    }
    if (log_enabled("recompiles")) {
      if (cache_.empty())
        std::fprintf(stderr, "[kiln] compiling %s for %s\n", name().c_str(), key.c_str());
      else
        std::fprintf(stderr, "[kiln] recompiling %s (%d cached): %s\n", name().c_str(),
                     static_cast<int>(cache_.size()), guard.diff(last_guard_->key).c_str());
    }
    artifact = trace_and_compile(*module_, input, grad_enabled, options_, stats_);
    cache_[key] = artifact;
    ++stats_.compiles;
  }
  last_guard_ = std::make_shared<Guard>(Guard{guard});

  std::vector<runtime::TensorView> primals{to_view(input)};
  for (const Tensor &t : artifact->captured) primals.push_back(to_view(t));
  for (const auto &draw : artifact->random_draws) primals.push_back(to_view(draw()));
  std::string error;
  runtime::Profiler &profiler = runtime::Profiler::instance();
  const double start_us = profiler.now_us();
  auto results = artifact->graph.forward->run(primals, &error);
  profiler.record("forward " + name(), "step", start_us, profiler.now_us() - start_us);
  KILN_CHECK(error.empty(), "kiln::compile: compiled forward failed: ", error);
  const int nfo = artifact->graph.num_forward_outputs;
  Tensor output = from_view(results[0]);

  if (artifact->graph.backward && !artifact->grad_inputs.empty()) {
    auto node = std::make_shared<CompiledBackward>();
    node->artifact = artifact;
    node->module_name = name();
    node->primals = primals;
    node->saved.assign(results.begin() + nfo, results.end());
    node->output_shapes = {output.sizes()};
    node->output_types = artifact->output_types;
    TensorList grad_targets;
    for (int pos : artifact->grad_inputs) grad_targets.push_back(pos == 0 ? input : artifact->captured[pos - 1]);
    autograd::set_history({output}, node, grad_targets);
  }
  return output;
}

std::string CompiledModule::describe(const Tensor &input) const {
  const GuardKey guard =
      GuardKey::of(input, is_training(), autograd::GradMode::is_enabled(), *module_, options_.autocast);
  auto it = cache_.find(guard.str());
  if (it == cache_.end()) return std::string();
  const codegen::CompiledGraph &g = it->second->graph;
  std::ostringstream os;
  os << "kiln::explain " << name() << "\n";
  os << "  guards: " << guard.str() << "\n";
  os << "  artifacts: " << stats_.compiles << " compiled, " << stats_.cache_hits << " cached calls, "
     << stats_.eager_fallbacks << " eager fallbacks (cache_size_limit " << options_.cache_size_limit << ")\n";
  os << "  graph breaks: none (an op that cannot be captured raises kiln::Error)\n";
  os << "  compile: " << g.compile_seconds << " s (frontend " << g.frontend_seconds << ", MLIR lowering "
     << g.mlir_lowering_seconds << ", LLVM " << g.llvm_seconds << ")" << (g.kernel_cache_hit ? ", kernel cache hit" : "")
     << "\n";
  os << "  saved for backward: " << g.num_saved << " values; random inputs (dropout masks): "
     << it->second->random_draws.size() << "\n";
  os << "  memory plan: forward arena " << g.forward->arena_bytes() << " bytes, " << g.forward->num_launches()
     << " launches";
  if (g.backward) os << "; backward arena " << g.backward->arena_bytes() << " bytes, " << g.backward->num_launches() << " launches";
  os << "\n  fusion groups (" << g.fusions.size() << "):\n";
  int64_t read = 0, written = 0;
  for (const auto &f : g.fusions) {
    os << "    " << f.name << ": " << f.num_ops << " ops, reads " << f.bytes_read << " B, writes " << f.bytes_written
       << " B\n";
    read += f.bytes_read;
    written += f.bytes_written;
  }
  os << "  total kernel traffic: " << read << " B read, " << written << " B written\n";
  if (!g.autocast.empty()) {
    os << "  autocast " << g.autocast << ": " << g.autocast_casts << " casts inserted (" << g.autocast_casts_removed
       << " redundant removed); ops in " << g.autocast << ":";
    for (const auto &[op, n] : g.autocast_ops) os << " " << op << " x" << n;
    os << "\n";
  }
  return os.str();
}

std::string explain(CompiledModule &model, const Tensor &input, bool print) {
  model.forward(input);
  std::string report = model.describe(input);
  if (report.empty()) report = "kiln::explain " + model.name() + ": this input ran eagerly (cache_size_limit reached)\n";
  if (print) std::fputs(report.c_str(), stderr);
  return report;
}

std::shared_ptr<CompiledModule> compile(std::shared_ptr<nn::Module> module, CompileOptions options) {
  return std::make_shared<CompiledModule>(std::move(module), std::move(options));
}

}  // namespace kiln
