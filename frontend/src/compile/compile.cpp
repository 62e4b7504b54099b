// kiln::compile: guard -> (trace -> compile) -> run the compiled forward, with
// a grad_fn that runs the compiled backward.
// Files: artifact.h lists the others (segments, replay, explain).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "compile/artifact.h"
#include "compile/compiled_backward.h"
#include "compile/cuda_graphs.h"
#include "kiln/ops.h"
#include "kiln/random.h"
#include "kiln/runtime/Profiler.h"
#include "compile/run_error.h"

namespace kiln {

using namespace compile_detail;

namespace {

/// The module standing for a compiled function: no parameters or buffers of
/// its own (those the function reads are found while tracing: FoundState).
class FunctionModule : public nn::Module {
public:
  std::string name() const override { return "Function"; }
};

}  // namespace

std::shared_ptr<nn::Module> detail::function_module() { return std::make_shared<FunctionModule>(); }

CompiledModule::CompiledModule(std::shared_ptr<nn::Module> module, CompileOptions options, Kind kind)
    : kind_(kind), module_(std::move(module)), options_(std::move(options)) {
  KILN_CHECK(module_ != nullptr, "kiln::compile: module is null");
  KILN_CHECK(options_.memory_budget >= 0.0 && options_.memory_budget <= 1.0,
             "kiln::compile: CompileOptions::memory_budget = ", options_.memory_budget,
             " is outside [0, 1] (1 = save what the min-cut saves, 0 = recompute everything)");
  if (options_.dump_ir_dir.empty())
    if (const char *env = std::getenv("KILN_DUMP_IR")) options_.dump_ir_dir = env;
  register_module("_orig_mod", module_);
  train(module_->is_training());
}

CompiledModule::~CompiledModule() = default;

void CompiledModule::warn_uncompilable(const char *type) {
  if (warned_uncompilable_) return;
  warned_uncompilable_ = true;
  std::fprintf(stderr, "[kiln] warning: %s computes in %s, which compiled kernels do not support yet; those calls "
               "(or graph-break segments) run eagerly, with eager's results\n", name().c_str(), type);
}

std::shared_ptr<CompiledModule::Artifact> CompiledModule::build_artifact(detail::CallSpec &call, const GuardKey &guard,
                                                                      bool grad_enabled,
                                                                      const std::string &state_change) {
  const bool log = log_enabled("recompiles") || log_enabled("dynamic");
  const std::string key = guard.str();
  // 1. A dynamic artifact whose symbol covers this size: no trace, no LLVM.
  for (const auto &family : families_) {
    if (guard.str(family->dim) != family->key) continue;
    const int64_t s = guard.shape()[family->dim];
    if (s < 2) break;
    std::string why;
    auto artifact = instantiate(*family, s, &why);
    if (artifact) {
      artifact->guard = std::make_shared<Guard>(Guard{guard});
      family->sizes.push_back(s);
      ++stats_.dynamic_instantiations;
      if (log)
        std::fprintf(stderr, "[kiln] %s: input %s reuses the dynamic artifact (dim %d = s = %lld), no recompile\n",
                     name().c_str(), shape_str(guard.shape()).c_str(), family->dim, static_cast<long long>(s));
      return artifact;
    }
    if (log) std::fprintf(stderr, "[kiln] %s: the dynamic artifact cannot serve s = %lld: %s\n", name().c_str(),
                          static_cast<long long>(s), why.c_str());
    break;
  }
  // 2. As torch._dynamo's cache_size_limit: stop compiling, run eagerly.
  if (stats_.compiles >= options_.cache_size_limit) {
    if (!warned_cache_limit_)
      std::fprintf(stderr,
                   "[kiln] warning: %s was recompiled %d times (cache_size_limit); new inputs run eagerly. "
                   "Last miss: %s. Keep input shapes stable or raise CompileOptions::cache_size_limit\n",
                   name().c_str(), stats_.compiles, guard.diff(last_guard_->key).c_str());
    warned_cache_limit_ = true;
    ++stats_.eager_fallbacks;
    return nullptr;
  }
  // 3. Trace, then compile: shape-generic if one dim changed against an
  // artifact compiled before (automatic dynamic shapes), else static.
  std::shared_ptr<Artifact> previous;
  int dim = -1;
  if (options_.automatic_dynamic_shapes)
    for (const auto &[k, a] : cache_)
      if (a->guard && !a->graph.dynamic && (dim = guard.single_changed_dim(a->guard->key)) >= 0) {
        previous = a;
        break;
      }
  std::string reason = cache_.empty() || !last_guard_ ? std::string() : guard.diff(last_guard_->key);
  if (!state_change.empty()) reason = reason.empty() ? state_change : reason + ", " + state_change;
  if (log) {
    if (reason.empty())
      std::fprintf(stderr, "[kiln] compiling %s for %s\n", name().c_str(), key.c_str());
    else
      std::fprintf(stderr, "[kiln] recompiling %s (%d compiled): %s%s\n", name().c_str(), stats_.compiles,
                   reason.c_str(),
                   guard.inputs.size() == 1 &&
                           std::any_of(guard.shape().begin(), guard.shape().end(), [](int64_t d) { return d < 2; }) &&
                           !families_.empty()
                       ? " (sizes 0 and 1 are specialized: a dynamic artifact never serves them)"
                       : "");
  }
  std::shared_ptr<Artifact> artifact;
  const Generator generator_before = default_generator();
  try {
    artifact = trace_call(call, grad_enabled, name());
    if (kind_ == Kind::Function) artifact->found = std::make_shared<FoundState>(FoundState::of(artifact->captured));
  } catch (const trace::GraphBreakError &e) {
    // As TorchDynamo: the graph is split at the op; from now on every call
    // records segments lazily and runs them compiled (forward_segments).
    default_generator() = generator_before;
    graph_breaks_ = true;
    if (log_enabled("graph_breaks") || log)
      std::fprintf(stderr, "[kiln] graph break in %s: op '%s' cannot be captured; the graph is split there, "
                   "the pieces before and after are compiled and '%s' runs eagerly\n",
                   name().c_str(), e.op.c_str(), e.op.c_str());
    return nullptr;
  } catch (const Error &e) {
    if (reason.empty()) throw;
    throw Error(std::string(e.what()) + "\n(while tracing " + name() + " again because " + reason + ")");
  }
  if (const char *type = uncompilable_type(artifact->traced)) {
    warn_uncompilable(type);
    eager_keys_.insert(key);
    ++stats_.eager_fallbacks;
    return nullptr;
  }
  artifact->guard = std::make_shared<Guard>(Guard{guard});
  ++stats_.compiles;
  if (previous) {
    std::string why;
    if (compile_artifact_dynamic(*artifact, *previous, dim, &why)) {
      recompile_reasons_.push_back(reason + "; dim " + std::to_string(dim) + " is now dynamic");
      if (log)
        std::fprintf(stderr, "[kiln] %s: dim %d of the input changed (%lld -> %lld); it is now dynamic (s): %d "
                     "shape-generic kernels serve every size >= 2\n", name().c_str(), dim,
                     static_cast<long long>(previous->guard->key.shape()[dim]),
                     static_cast<long long>(guard.shape()[dim]), artifact->graph.num_generic_kernels);
      return artifact;
    }
    if (log) std::fprintf(stderr, "[kiln] %s: dim %d stays static: %s\n", name().c_str(), dim, why.c_str());
    recompile_reasons_.push_back(reason + "; dim " + std::to_string(dim) + " stays static: " + why);
  } else if (!reason.empty()) {
    recompile_reasons_.push_back(reason);
  }
  compile_artifact_static(*module_, *artifact, options_, stats_);
  use_cuda_graphs(*artifact);
  return artifact;
}

const CompileStats &CompiledModule::stats() const {
  if (cuda_graphs_) {
    stats_.cuda_graph_captures = cuda_graphs_->captures;
    stats_.cuda_graph_replays = cuda_graphs_->replays;
    stats_.cuda_graph_fallbacks = cuda_graphs_->fallbacks;
    stats_.cuda_graph_pool_bytes = cuda_graphs_->pool_reserved_bytes();
  }
  return stats_;
}

/// CompileOptions::cuda_graphs: a static artifact on CUDA runs its forward
/// and backward through CUDA graphs (compile/cuda_graphs.h).
void CompiledModule::use_cuda_graphs(Artifact &artifact) {
  const Device device = artifact.guard->key.inputs[0].device;
  if (!options_.cuda_graphs || device.type != DeviceType::CUDA || !artifact.graph.forward) return;
  if (!cuda_graphs_) {
    cuda_graphs_ = std::make_shared<CudaGraphs>();
    cuda_graphs_->device = device.index;
  }
  std::string shape;
  for (const auto &in : artifact.guard->key.inputs) {
    shape += shape.empty() ? "[" : "; [";
    for (size_t d = 0; d < in.shape.size(); ++d) shape += (d ? ", " : "") + std::to_string(in.shape[d]);
    shape += "]";
  }
  const size_t primals = static_cast<size_t>(artifact.num_inputs) + artifact.captured.size() + artifact.random_draws.size();
  auto stable = [&](size_t n) {
    std::vector<bool> v(n, false);
    for (size_t i = static_cast<size_t>(artifact.num_inputs); i < artifact.num_inputs + artifact.captured.size() && i < n; ++i)
      v[i] = true;
    return v;
  };
  artifact.graph.forward = compile_detail::with_cuda_graphs(artifact.graph.forward, cuda_graphs_, stable(primals),
                                                            "forward " + shape);
  if (artifact.graph.backward) {
    const size_t n = primals + static_cast<size_t>(artifact.graph.num_saved) + artifact.grad_outputs.size();
    artifact.graph.backward = compile_detail::with_cuda_graphs(artifact.graph.backward, cuda_graphs_, stable(n),
                                                               "backward " + shape);
  }
}

bool CompiledModule::compile_artifact_dynamic(Artifact &artifact, const Artifact &previous, int dim, std::string *why) {
  const int64_t s = artifact.guard->key.shape()[dim], s_old = previous.guard->key.shape()[dim];
  auto family = std::make_shared<DynamicFamily>();
  if (!ir::fitSymbolicGraph(artifact.traced, s, previous.traced, s_old, &family->symbolic, why)) return false;
  for (size_t i = 0; i < artifact.captured.size(); ++i)
    if (family->symbolic.isDynamic(artifact.traced.inputs[artifact.num_inputs + i])) {
      *why = "captured tensor " + std::to_string(i) + " (not a parameter: created inside forward) has a shape that "
             "depends on the input's dim " + std::to_string(dim);
      return false;
    }
  auto start = std::chrono::steady_clock::now();
  if (!codegen::compileGraphDynamic(artifact.traced, previous.traced, codegen_options(*module_, options_, stats_, artifact.guard->key.inputs[0].device),
                                    &artifact.graph, &family->kernels, why))
    return false;
  record_compile(artifact, seconds_since(start), stats_);
  if (options_.cuda_graphs && artifact.guard->key.inputs[0].device.type == DeviceType::CUDA) {
    if (!cuda_graphs_) {
      cuda_graphs_ = std::make_shared<CudaGraphs>();
      cuda_graphs_->device = artifact.guard->key.inputs[0].device.index;
    }
    cuda_graphs_->notes.push_back("shape-generic artifact (input dim " + std::to_string(dim) +
                                  " dynamic): stream launches, no CUDA graphs (sizes change per call)");
  }
  family->key = artifact.guard->key.str(dim);
  family->dim = dim;
  family->prototype = std::make_shared<Artifact>(artifact);
  family->prototype->graph = codegen::CompiledGraph();
  family->sizes = {s};
  families_.push_back(family);
  return true;
}

std::shared_ptr<CompiledModule::Artifact> CompiledModule::instantiate(const DynamicFamily &family, int64_t s,
                                                                      std::string *why) {
  auto artifact = std::make_shared<Artifact>(*family.prototype);
  artifact->traced = ir::instantiate(family.symbolic, s);
  const size_t first_random = artifact->num_inputs + artifact->captured.size();
  for (size_t i = 0; i < artifact->random_shapes.size(); ++i)
    artifact->random_shapes[i] = artifact->traced.values[artifact->traced.inputs[first_random + i]].shape;
  if (!codegen::instantiateGraphDynamic(artifact->traced, family.kernels, &artifact->graph, why)) return nullptr;
  return artifact;
}

Tensor CompiledModule::forward(const Tensor &input) {
  KILN_CHECK(input.defined(), "kiln::compile: ", name(), " called with an undefined input");
  detail::CallSpec call;
  call.inputs = {input};
  call.input_names = {"input"};
  call.body = [this](const std::vector<Tensor> &in) { return std::vector<Tensor>{module_->forward(in[0])}; };
  std::vector<Tensor> outputs = call_compiled(call);
  KILN_CHECK(outputs.size() == 1, "kiln::compile: ", name(), ".forward(const Tensor &) returns one tensor; the module "
             "returned ", outputs.size(), ": call forward({...})");
  return outputs[0];
}

std::vector<Tensor> CompiledModule::forward(const std::vector<Tensor> &inputs) {
  if (num_inputs_ < 0) num_inputs_ = static_cast<int>(inputs.size());
  KILN_CHECK(static_cast<int>(inputs.size()) == num_inputs_, "kiln::compile: ", name(), ".forward: expected ",
             num_inputs_, " input tensors (as in its first call), got ", inputs.size());
  detail::CallSpec call;
  call.inputs = inputs;
  for (size_t i = 0; i < inputs.size(); ++i)
    call.input_names.push_back(inputs.size() == 1 ? std::string("input") : "input " + std::to_string(i));
  call.body = [this](const std::vector<Tensor> &in) { return module_->forward(in); };
  return call_compiled(call);
}

std::shared_ptr<CompiledModule::Artifact> CompiledModule::cached_artifact(const std::string &key, std::string *why) {
  auto it = cache_.find(key);
  if (it == cache_.end()) return nullptr;
  const std::shared_ptr<Artifact> &artifact = it->second;
  if (artifact->found) {
    *why = artifact->found->check(artifact->captured);
    if (!why->empty()) return nullptr;  // a found module or tensor changed: trace again
  }
  return artifact;
}

std::vector<Tensor> CompiledModule::call_compiled(detail::CallSpec &call) {
  compile_device(call, *module_);
  // Traces (whole graph or segments) mark what eager autocast runs in float32.
  trace::RecordAutocastScopes autocast_scopes(options_.autocast != kFloat32);
  if (graph_breaks_) return forward_segments(call);
  const bool grad_enabled = autograd::GradMode::is_enabled();
  const GuardKey guard =
      GuardKey::of(call, is_training(), grad_enabled, *module_, options_.autocast, options_.guard_scalars);
  const std::string key = guard.str();
  if (eager_keys_.count(key)) {  // a dtype the compiler does not support yet
    ++stats_.eager_fallbacks;
    return call.body(call.inputs);
  }
  std::string state_change;
  std::shared_ptr<Artifact> artifact = cached_artifact(key, &state_change);
  if (artifact) {
    ++stats_.cache_hits;
  } else {
    artifact = build_artifact(call, guard, grad_enabled, state_change);
    if (graph_breaks_) return forward_segments(call);
    if (!artifact) return call.body(call.inputs);  // cache_size_limit reached or a dtype not compiled: eager
    cache_[key] = artifact;
  }
  last_guard_ = std::make_shared<Guard>(Guard{guard});
  return run_artifact(artifact, call);
}

std::vector<Tensor> CompiledModule::run_artifact(const std::shared_ptr<Artifact> &artifact,
                                                 const detail::CallSpec &call) {
  std::vector<runtime::TensorView> primals;
  for (const Tensor &t : call.inputs) primals.push_back(to_view(t));
  for (const Tensor &t : artifact->captured) primals.push_back(to_view(t));
  for (size_t i = 0; i < artifact->random_draws.size(); ++i)
    primals.push_back(to_view(artifact->random_draws[i](artifact->random_shapes[i])));
  std::string error;
  runtime::Profiler &profiler = runtime::Profiler::instance();
  const double start_us = profiler.now_us();
  auto results = artifact->graph.forward->run(primals, &error);
  profiler.record("forward " + name(), "step", start_us, profiler.now_us() - start_us);
  compile_detail::check_run(error, "forward");
  const int nfo = artifact->graph.num_forward_outputs;
  // Forward outputs: the call's outputs, then the new values of mutated
  // buffers (written back below), then what backward saves.
  const int num_outputs = nfo - static_cast<int>(artifact->mutated.size());
  std::vector<Tensor> outputs;
  for (int k = 0; k < num_outputs; ++k) outputs.push_back(from_view(results[k]));
  if (!artifact->graph.backward || artifact->grad_inputs.empty()) {
    write_back_mutations(*artifact, results, nullptr);
    return outputs;
  }
  // One backward node for all outputs (AOTAutograd's CompiledFunction): the
  // gradient of an output nobody used is a zero tangent, and a target only
  // such outputs reach gets no gradient (reach), as in eager.
  auto node = std::make_shared<CompiledBackward>();
  node->artifact = artifact;
  node->module_name = name();
  node->primals = primals;
  node->saved.assign(results.begin() + nfo, results.end());
  node->reach = artifact->reach;
  TensorList with_grad;
  for (int k : artifact->grad_outputs) {
    with_grad.push_back(outputs[k]);
    node->output_shapes.push_back(outputs[k].sizes());
    node->output_types.push_back(artifact->output_types[k]);
    node->output_devices.push_back(outputs[k].device());
  }
  TensorList grad_targets;
  for (int pos : artifact->grad_inputs)
    grad_targets.push_back(pos < artifact->num_inputs ? call.inputs[pos] : artifact->captured[pos - artifact->num_inputs]);
  autograd::set_history(with_grad, node, grad_targets);
  write_back_mutations(*artifact, results, &node->primals);
  return outputs;
}

std::shared_ptr<CompiledModule> compile(std::shared_ptr<nn::Module> module, CompileOptions options) {
  return std::make_shared<CompiledModule>(std::move(module), std::move(options));
}

}  // namespace kiln
