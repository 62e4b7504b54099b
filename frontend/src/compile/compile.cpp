// kiln::compile: guard -> (trace -> compile) -> run the compiled forward, with
// a grad_fn that runs the compiled backward.
// Files: artifact.h lists the others (segments, replay, explain).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "compile/artifact.h"
#include "compile/compiled_backward.h"
#include "kiln/ops.h"
#include "kiln/random.h"
#include "kiln/runtime/Profiler.h"
#include "compile/run_error.h"

namespace kiln {

using namespace compile_detail;

CompiledModule::CompiledModule(std::shared_ptr<nn::Module> module, CompileOptions options)
    : module_(std::move(module)), options_(std::move(options)) {
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

std::shared_ptr<CompiledModule::Artifact> CompiledModule::build_artifact(const Tensor &input, const GuardKey &guard,
                                                                      bool grad_enabled) {
  const bool log = log_enabled("recompiles") || log_enabled("dynamic");
  const std::string key = guard.str();
  // 1. A dynamic artifact whose symbol covers this size: no trace, no LLVM.
  for (const auto &family : families_) {
    if (guard.str(family->dim) != family->key) continue;
    const int64_t s = guard.shape[family->dim];
    if (s < 2) break;
    std::string why;
    auto artifact = instantiate(*family, s, &why);
    if (artifact) {
      artifact->guard = std::make_shared<Guard>(Guard{guard});
      family->sizes.push_back(s);
      ++stats_.dynamic_instantiations;
      if (log)
        std::fprintf(stderr, "[kiln] %s: input %s reuses the dynamic artifact (dim %d = s = %lld), no recompile\n",
                     name().c_str(), shape_str(guard.shape).c_str(), family->dim, static_cast<long long>(s));
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
  const std::string reason = cache_.empty() || !last_guard_ ? std::string() : guard.diff(last_guard_->key);
  if (log) {
    if (reason.empty())
      std::fprintf(stderr, "[kiln] compiling %s for %s\n", name().c_str(), key.c_str());
    else
      std::fprintf(stderr, "[kiln] recompiling %s (%d compiled): %s%s\n", name().c_str(), stats_.compiles,
                   reason.c_str(),
                   std::any_of(guard.shape.begin(), guard.shape.end(), [](int64_t d) { return d < 2; }) &&
                           !families_.empty()
                       ? " (sizes 0 and 1 are specialized: a dynamic artifact never serves them)"
                       : "");
  }
  std::shared_ptr<Artifact> artifact;
  const Generator generator_before = default_generator();
  try {
    artifact = trace_module(*module_, input, grad_enabled);
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
                     static_cast<long long>(previous->guard->key.shape[dim]),
                     static_cast<long long>(guard.shape[dim]), artifact->graph.num_generic_kernels);
      return artifact;
    }
    if (log) std::fprintf(stderr, "[kiln] %s: dim %d stays static: %s\n", name().c_str(), dim, why.c_str());
    recompile_reasons_.push_back(reason + "; dim " + std::to_string(dim) + " stays static: " + why);
  } else if (!reason.empty()) {
    recompile_reasons_.push_back(reason);
  }
  compile_artifact_static(*module_, *artifact, options_, stats_);
  return artifact;
}

bool CompiledModule::compile_artifact_dynamic(Artifact &artifact, const Artifact &previous, int dim, std::string *why) {
  const int64_t s = artifact.guard->key.shape[dim], s_old = previous.guard->key.shape[dim];
  auto family = std::make_shared<DynamicFamily>();
  if (!ir::fitSymbolicGraph(artifact.traced, s, previous.traced, s_old, &family->symbolic, why)) return false;
  for (size_t i = 0; i < artifact.captured.size(); ++i)
    if (family->symbolic.isDynamic(artifact.traced.inputs[1 + i])) {
      *why = "captured tensor " + std::to_string(i) + " (not a parameter: created inside forward) has a shape that "
             "depends on the input's dim " + std::to_string(dim);
      return false;
    }
  auto start = std::chrono::steady_clock::now();
  if (!codegen::compileGraphDynamic(artifact.traced, previous.traced, codegen_options(*module_, options_, stats_, artifact.guard->key.device),
                                    &artifact.graph, &family->kernels, why))
    return false;
  record_compile(artifact, seconds_since(start), stats_);
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
  const size_t first_random = 1 + artifact->captured.size();
  for (size_t i = 0; i < artifact->random_shapes.size(); ++i)
    artifact->random_shapes[i] = artifact->traced.values[artifact->traced.inputs[first_random + i]].shape;
  if (!codegen::instantiateGraphDynamic(artifact->traced, family.kernels, &artifact->graph, why)) return nullptr;
  return artifact;
}

Tensor CompiledModule::forward(const Tensor &input) {
  KILN_CHECK(input.defined(), "kiln::compile: ", name(), " called with an undefined input");
  compile_device(input, *module_);
  // Traces (whole graph or segments) mark what eager autocast runs in float32.
  trace::RecordAutocastScopes autocast_scopes(options_.autocast != kFloat32);
  if (graph_breaks_) return forward_segments(input);
  const bool grad_enabled = autograd::GradMode::is_enabled();
  const GuardKey guard =
      GuardKey::of(input, is_training(), grad_enabled, *module_, options_.autocast, options_.guard_scalars);
  const std::string key = guard.str();
  if (eager_keys_.count(key)) {  // a dtype the compiler does not support yet
    ++stats_.eager_fallbacks;
    return module_->forward(input);
  }
  auto it = cache_.find(key);
  std::shared_ptr<Artifact> artifact;
  if (it != cache_.end()) {
    artifact = it->second;
    ++stats_.cache_hits;
  } else {
    artifact = build_artifact(input, guard, grad_enabled);
    if (graph_breaks_) return forward_segments(input);
    if (!artifact) return module_->forward(input);  // cache_size_limit reached or a dtype not compiled: eager
    cache_[key] = artifact;
  }
  last_guard_ = std::make_shared<Guard>(Guard{guard});

  std::vector<runtime::TensorView> primals{to_view(input)};
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

std::shared_ptr<CompiledModule> compile(std::shared_ptr<nn::Module> module, CompileOptions options) {
  return std::make_shared<CompiledModule>(std::move(module), std::move(options));
}

}  // namespace kiln
