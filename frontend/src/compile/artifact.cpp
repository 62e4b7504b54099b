// compile/artifact.cpp - tracing a module for kiln::compile, codegen's
// options, and the compile statistics of an artifact.
#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "compile/artifact.h"
#include "compile/replay.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln::compile_detail {

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
  impl->device = v.buffer ? v.buffer->device() : kCPU;  // where the executable put it
  return Tensor(std::move(impl));
}

bool log_enabled(const char *what) {
  const char *env = std::getenv("KILN_LOG");
  return env && std::string(env).find(what) != std::string::npos;
}

/// The defined gradients among `grads`, and in `positions` the positions of
/// those (a tensor that no gradient reaches keeps an undefined .grad, as in
/// eager: a zero gradient would let optimizers decay and move it).
std::vector<Tensor> defined_gradients(const std::vector<Tensor> &grads, std::vector<int> &positions) {
  std::vector<Tensor> kept;
  std::vector<int> kept_positions;
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i].defined()) {
      kept.push_back(grads[i]);
      kept_positions.push_back(positions[i]);
    }
  positions = std::move(kept_positions);
  return kept;
}

/// Traced copies of the call's inputs: detached, requiring grad where the
/// input does and a backward is traced; each declared as a user input.
static std::vector<Tensor> traced_inputs(const detail::CallSpec &call, bool with_backward, trace::Tracer &tracer) {
  std::vector<Tensor> traced;
  for (const Tensor &input : call.inputs) {
    Tensor t = input.detach();
    if (input.requires_grad() && with_backward) t.requires_grad_(true);
    tracer.add_user_input(t);
    traced.push_back(t);
  }
  return traced;
}

/// Traces the backward of `outputs` (one ones-like tangent per output that
/// requires grad) into `tracer`: the defined gradients of the captured
/// leaves that require grad, then of the inputs that do (AOTAutograd's joint
/// graph); records grad_inputs, grad_outputs and reach in `artifact`.
static std::vector<Tensor> trace_backward(const std::vector<Tensor> &outputs, const std::vector<Tensor> &inputs,
                                          trace::Tracer &tracer, CompiledModule::Artifact &artifact) {
  std::vector<Tensor> with_grad, tangents;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k].requires_grad()) continue;
    Tensor tangent;
    {
      trace::PauseTracing pause;
      tangent = ones_like(outputs[k]);
    }
    tracer.add_tangent(tangent);
    artifact.grad_outputs.push_back(static_cast<int>(k));
    with_grad.push_back(outputs[k]);
    tangents.push_back(tangent);
  }
  if (with_grad.empty()) return {};
  std::vector<Tensor> targets;
  std::vector<int> positions;
  const auto &captured = tracer.captured();
  const int num_inputs = static_cast<int>(inputs.size());
  for (size_t i = 0; i < captured.size(); ++i)
    if (captured[i].requires_grad() && captured[i].is_leaf()) {
      targets.push_back(captured[i]);
      positions.push_back(static_cast<int>(i) + num_inputs);
    }
  for (int i = 0; i < num_inputs; ++i)
    if (inputs[i].requires_grad()) {
      targets.push_back(inputs[i]);
      positions.push_back(i);
    }
  if (targets.empty()) return {};
  const std::vector<int> all_positions = positions;
  std::vector<std::vector<bool>> reach;
  if (with_grad.size() > 1) reach = gradient_reach(with_grad, targets);
  std::vector<Tensor> grads = defined_gradients(autograd::grad(with_grad, tangents, targets), positions);
  artifact.grad_inputs = positions;
  for (const auto &row : reach) {  // the columns of the targets that got a gradient
    std::vector<bool> kept;
    for (int pos : positions)
      kept.push_back(row[std::find(all_positions.begin(), all_positions.end(), pos) - all_positions.begin()]);
    artifact.reach.push_back(std::move(kept));
  }
  return grads;
}

std::shared_ptr<CompiledModule::Artifact> trace_call(const detail::CallSpec &call, bool with_backward,
                                                     const std::string &name) {
  auto artifact = std::make_shared<CompiledModule::Artifact>();
  artifact->num_inputs = static_cast<int>(call.inputs.size());
  // Tracing runs the model once; random draws made while tracing must not
  // shift the generator, so the compiled call that follows sees exactly the
  // state an eager call would.
  const Generator generator_before = default_generator();
  trace::Tracer tracer;
  std::vector<Tensor> outputs, grads;
  {
    trace::TracingScope scope(&tracer);
    const std::vector<Tensor> inputs = traced_inputs(call, with_backward, tracer);
    outputs = call.body(inputs);
    KILN_CHECK(!outputs.empty(), "kiln::compile: ", name, " returned no tensors");
    for (size_t k = 0; k < outputs.size(); ++k)
      KILN_CHECK(outputs[k].defined(), "kiln::compile: ", name, " returned an undefined tensor",
                 outputs.size() > 1 ? " as output " + std::to_string(k) : std::string());
    if (with_backward) grads = trace_backward(outputs, inputs, tracer, *artifact);
  }
  default_generator() = generator_before;
  artifact->traced = tracer.finish(outputs, grads);
  artifact->captured = tracer.captured();
  artifact->mutated = tracer.mutated();
  artifact->random_draws = tracer.random_draws();
  const size_t first_random = call.inputs.size() + artifact->captured.size();
  for (size_t i = 0; i < artifact->random_draws.size(); ++i)
    artifact->random_shapes.push_back(artifact->traced.values[artifact->traced.inputs[first_random + i]].shape);
  for (const Tensor &t : outputs) artifact->output_types.push_back(t.dtype());
  return artifact;
}

void write_back_mutations(const CompiledModule::Artifact &artifact, const std::vector<runtime::TensorView> &results,
                          std::vector<runtime::TensorView> *backward_primals) {
  NoGradGuard no_grad;
  const size_t first = artifact.graph.num_forward_outputs - artifact.mutated.size();
  for (size_t k = 0; k < artifact.mutated.size(); ++k) {
    const int index = artifact.mutated[k];
    Tensor target = artifact.captured[index];
    if (backward_primals) (*backward_primals)[artifact.num_inputs + index] = to_view(target.clone());
    target.copy_(from_view(results[first + k]));
  }
}

codegen::CompileOptions codegen_options(const nn::Module &module, const CompileOptions &options,
                                        const CompileStats &stats, Device device) {
  codegen::CompileOptions copts;
  copts.device = device;
  for (const CustomPass &custom : options.custom_passes)
    copts.custom_passes.push_back({custom.stage, custom.position == CustomPass::Position::After, custom.pipeline});
  copts.remat = options.remat;
  copts.memory_budget = options.memory_budget;
  copts.autocast = options.autocast;
  // One folder per compiled graph: <dir>/<Module>-<n>/NN-<stage>.mlir.
  if (!options.dump_ir_dir.empty())
    copts.dump_ir_dir = options.dump_ir_dir + "/" + module.name() + "-" + std::to_string(stats.compiles);
  return copts;
}

Device compile_device(const detail::CallSpec &call, const nn::Module &module) {
  KILN_CHECK(!call.inputs.empty(), "kiln::compile: ", module.name(), " was called without a tensor argument; a "
             "compiled function needs at least one");
  for (size_t i = 0; i < call.inputs.size(); ++i)
    KILN_CHECK(call.inputs[i].defined(), "kiln::compile: Compiled", module.name(), " called with an undefined tensor as ",
               call.input_names[i]);
  const Device device = call.inputs[0].device();
  const std::string first = call.input_names[0];
  for (size_t i = 1; i < call.inputs.size(); ++i)
    KILN_CHECK(call.inputs[i].device() == device, "kiln::compile: expected every input of Compiled", module.name(),
               " on one device, got ", device.str(), " (", first, ") and ", call.inputs[i].device().str(), " (",
               call.input_names[i], ")");
  auto check = [&](const Tensor &t, const char *kind, const std::string &name) {
    KILN_CHECK(t.device() == device, "kiln::compile: expected the input and every parameter and buffer of ",
               module.name(), " on one device, got ", device.str(), " (", first, ") and ", t.device().str(), " (",
               kind, " ", name, ")");
  };
  for (const auto &[name, p] : module.named_parameters()) check(p, "parameter", name);
  for (const auto &[name, b] : module.named_buffers()) check(b, "buffer", name);
  KILN_CHECK(codegen::hasCompileTarget(device.type), "kiln::compile: no compile target for device ", device.str(),
             " (", module.name(), "'s ", first, "); codegen::register_target registers one, the CPU's is built in");
  return device;
}

void record_compile(CompiledModule::Artifact &artifact, double seconds, CompileStats &stats) {
  stats.last_compile_seconds = seconds;
  stats.num_fusions = static_cast<int>(artifact.graph.fusions.size());
  stats.forward_arena_bytes = artifact.graph.forward->arena_bytes();
  // The backward's arena when the saved activations are donated (every
  // backward without retain_graph whose saved buffers nothing else holds).
  stats.backward_arena_bytes = artifact.graph.backward ? artifact.graph.backward->donating_arena_bytes() : 0;
  stats.arena_bytes = stats.forward_arena_bytes + stats.backward_arena_bytes;
  stats.saved_bytes = artifact.graph.saved_bytes;
  stats.recompute_flops = artifact.graph.recompute_flops;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Compiles a traced artifact with static shapes.
void compile_artifact_static(nn::Module &module, CompiledModule::Artifact &artifact, const CompileOptions &options,
                    CompileStats &stats) {
  std::string error;
  auto start = std::chrono::steady_clock::now();
  bool ok = codegen::compileGraph(artifact.traced, codegen_options(module, options, stats, artifact.guard->key.inputs[0].device),
                                  &artifact.graph, &error);
  KILN_CHECK(ok, "kiln::compile: compiling ", module.name(), " failed: ", error,
             "\nRun the model eagerly (without kiln::compile) to work around this, and set KILN_DUMP_IR=<dir> "
             "to see the IR.");
  record_compile(artifact, seconds_since(start), stats);
}

/// The first element type in `graph` that the kiln dialect does not have
/// (int32), or nullptr.
const char *uncompilable_type(const ir::Graph &graph) {
  for (const ir::Value &v : graph.values)
    if (v.type == ir::ElementType::I32) return ir::toString(v.type);
  return nullptr;
}

}  // namespace kiln::compile_detail
