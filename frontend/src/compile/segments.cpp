// compile/segments.cpp - graph breaks: the forward of a module that hit an
// uncapturable op runs under a lazy tracer; each flushed segment is
// compiled once per exact graph (with its own compiled backward) or, past
// cache_size_limit, replayed eagerly.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "compile/artifact.h"
#include "compile/compiled_backward.h"
#include "compile/replay.h"
#include "kiln/ops.h"
#include "kiln/runtime/Profiler.h"
#include "compile/run_error.h"

namespace kiln {

using namespace compile_detail;

namespace {

/// The device a segment runs on: its inputs' (forward checked that the
/// module's input, parameters and buffers share one).
Device segment_device(const std::vector<Tensor> &inputs) {
  return inputs.empty() ? kCPU : inputs.front().device();
}

}  // namespace

std::vector<Tensor> CompiledModule::forward_segments(detail::CallSpec &call) {
  const bool grad_enabled = autograd::GradMode::is_enabled();
  trace::Tracer tracer;
  std::vector<std::string> breaks;
  tracer.set_lazy(
      [&](const char *op) {
        flush_segment(tracer, grad_enabled, op);
        if (op) breaks.push_back(op);  // nullptr: a checkpoint region's boundary
      },
      grad_enabled);
  // The memory stats describe this call: the sums over its segments.
  next_site_ = 0;
  stats_.num_fusions = 0;
  stats_.saved_bytes = stats_.recompute_flops = 0;
  stats_.forward_arena_bytes = stats_.backward_arena_bytes = 0;
  std::vector<Tensor> outputs;
  {
    // Lazy recording builds no autograd graph (any_requires_grad is false
    // under it) and keeps the user's grad mode, so in-place checks and
    // NoGradGuard regions inside forward behave as in eager; each flushed
    // segment gives its outputs the compiled backward as grad_fn.
    trace::TracingScope scope(&tracer);
    outputs = call.body(call.inputs);
  }
  flush_segment(tracer, grad_enabled, nullptr);  // the outputs are live: they get their values here
  stats_.arena_bytes = stats_.forward_arena_bytes + stats_.backward_arena_bytes;
  last_breaks_ = std::move(breaks);
  return outputs;
}

void CompiledModule::flush_segment(trace::Tracer &tracer, bool grad_enabled, const char *op) {
  trace::PauseTracing pause;  // everything here runs for real and records nothing
  auto live = tracer.live_values();
  if (live.empty()) {
    tracer.reset();
    return;
  }
  SegmentCall call;
  for (auto &[id, tensors] : live)
    for (Tensor &t : tensors) call.holders.push_back(t);
  call.graph = tracer.finish(call.holders, {});
  call.inputs = tracer.captured();
  call.detached = tracer.detached();
  call.no_grad = tracer.no_grad();
  call.checkpointed = tracer.in_checkpoint();
  call.grad_enabled = grad_enabled;
  call.site = next_site_++;
  tracer.reset();
  call.key = graph_signature(call.graph) + "|detached=";
  for (int id : call.detached) call.key += std::to_string(id) + ",";
  call.key += "|no_grad=";
  for (int id : call.no_grad) call.key += std::to_string(id) + ",";
  call.key += call.checkpointed ? "|checkpoint|rg=" : "|rg=";
  for (const Tensor &t : call.inputs) call.key += (grad_enabled && t.requires_grad()) ? '1' : '0';
  std::shared_ptr<Segment> segment = find_segment(call, op);
  if (segment)
    run_segment(*segment, call);
  else
    run_segment_eagerly(call);
}

std::shared_ptr<CompiledModule::Segment> CompiledModule::find_segment(const SegmentCall &call, const char *op) {
  if (sites_.size() <= static_cast<size_t>(call.site)) sites_.resize(call.site + 1);
  if (!sites_[call.site]) sites_[call.site] = std::make_shared<SegmentSite>();
  SegmentSite &site = *sites_[call.site];
  auto it = segments_.find(call.key);
  if (it != segments_.end()) {
    ++stats_.cache_hits;
    site.last = call.graph;
    site.last_key = call.key;
    return it->second;
  }
  const bool log = log_enabled("graph_breaks") || log_enabled("recompiles");
  const std::string reason = site.compiled > 0 ? segment_change(site.last, call.graph) : std::string();
  site.last = call.graph;
  site.last_key = call.key;
  // As torch._dynamo's cache_size_limit, per segment position: a segment
  // whose graph changes on every call (a host value baked in as a constant)
  // stops compiling and runs eagerly.
  if (const char *type = uncompilable_type(call.graph)) {
    warn_uncompilable(type);
    ++stats_.eager_fallbacks;
    return nullptr;
  }
  if (site.compiled >= options_.cache_size_limit) {
    if (!warned_segment_limit_)
      std::fprintf(stderr,
                   "[kiln] warning: segment %d of %s was recompiled %d times (cache_size_limit); it now runs eagerly. "
                   "Last change: %s. Raise CompileOptions::cache_size_limit or keep the segment's constants and "
                   "shapes stable\n",
                   call.site + 1, name().c_str(), site.compiled, reason.c_str());
    warned_segment_limit_ = true;
    ++stats_.eager_fallbacks;
    return nullptr;
  }
  auto segment = trace_and_compile_segment(call);
  segments_[call.key] = segment;
  ++site.compiled;
  if (!reason.empty()) recompile_reasons_.push_back("segment " + std::to_string(call.site + 1) + ": " + reason);
  if (log)
    std::fprintf(stderr, "[kiln] %s: compiled segment %d (%d ops, %zu inputs, %zu outputs%s) ending %s%s%s%s%s\n",
                 name().c_str(), call.site + 1, segment->num_ops, call.inputs.size(), call.holders.size(),
                 call.checkpointed ? ", checkpointed: recomputed in backward" : "",
                 op ? "at the graph break '" : "at a checkpoint boundary or the forward's end", op ? op : "",
                 op ? "'" : "", reason.empty() ? "" : "; recompiled because ", reason.c_str());
  return segment;
}

void CompiledModule::run_segment(const Segment &segment, SegmentCall &call) {
  const Artifact &artifact = *segment.artifact;
  std::vector<runtime::TensorView> primals;
  for (const Tensor &t : call.inputs) primals.push_back(to_view(t));
  std::string error;
  runtime::Profiler &profiler = runtime::Profiler::instance();
  const double start_us = profiler.now_us();
  auto results = artifact.graph.forward->run(primals, &error);
  profiler.record("segment " + name(), "step", start_us, profiler.now_us() - start_us);
  compile_detail::check_run(error, "segment");
  {
    NoGradGuard no_grad;
    for (size_t k = 0; k < call.holders.size(); ++k) assign_value(call.holders[k], from_view(results[k]));
  }
  const codegen::CompiledGraph &g = artifact.graph;
  stats_.num_fusions += static_cast<int>(g.fusions.size());
  stats_.forward_arena_bytes = std::max(stats_.forward_arena_bytes, g.forward->arena_bytes());
  if (!g.backward || artifact.grad_inputs.empty() || segment.grad_outputs.empty()) return;
  stats_.saved_bytes += g.saved_bytes;
  stats_.recompute_flops += g.recompute_flops;
  stats_.backward_arena_bytes = std::max(stats_.backward_arena_bytes, g.backward->donating_arena_bytes());
  auto node = std::make_shared<CompiledBackward>();
  node->artifact = segment.artifact;
  node->module_name = name();
  node->primals = primals;
  node->saved.assign(results.begin() + g.num_forward_outputs, results.end());
  node->reach = segment.reach;
  node->eager_backward = segment_eager_backward(call, segment.grad_outputs, artifact.grad_inputs);
  TensorList outs;
  for (int k : segment.grad_outputs) {
    outs.push_back(call.holders[k]);
    node->output_shapes.push_back(call.holders[k].sizes());
    node->output_types.push_back(call.holders[k].dtype());
    node->output_devices.push_back(call.holders[k].device());
  }
  TensorList targets;
  for (int pos : artifact.grad_inputs) targets.push_back(call.inputs[pos]);
  autograd::set_history(outs, node, targets);
}

std::function<std::vector<Tensor>(const std::vector<Tensor> &)> CompiledModule::segment_eager_backward(
    const SegmentCall &call, const std::vector<int> &grad_outputs, const std::vector<int> &grad_inputs) {
  std::vector<Tensor> inputs;
  for (const Tensor &t : call.inputs) inputs.push_back(t.detach());
  return [graph = call.graph, detached = call.detached, no_grad = call.no_grad, inputs, grad_outputs,
          grad_inputs](const TensorList &grads) {
    EnableGradGuard enable;
    std::vector<Tensor> values(graph.values.size());
    TensorList targets;
    for (size_t i = 0; i < inputs.size(); ++i) {
      Tensor leaf = inputs[i].detach();
      if (std::find(grad_inputs.begin(), grad_inputs.end(), static_cast<int>(i)) != grad_inputs.end()) {
        leaf.requires_grad_(true);
        targets.push_back(leaf);
      }
      values[graph.inputs[i]] = leaf;
    }
    replay_nodes(graph, detached, no_grad, values);
    TensorList roots, root_grads;
    for (size_t k = 0; k < grad_outputs.size(); ++k) {
      Tensor root = values[graph.outputs[grad_outputs[k]]];
      if (!grads[k].defined() || !root.requires_grad()) continue;
      roots.push_back(root);
      root_grads.push_back(grads[k]);
    }
    if (roots.empty()) return TensorList(targets.size());
    return autograd::grad(roots, root_grads, targets);
  };
}

void CompiledModule::run_segment_eagerly(SegmentCall &call) {
  std::vector<Tensor> values(call.graph.values.size());
  for (size_t i = 0; i < call.inputs.size(); ++i) values[call.graph.inputs[i]] = call.inputs[i];
  {
    const bool was_enabled = autograd::GradMode::is_enabled();
    autograd::GradMode::set_enabled(call.grad_enabled);
    try {
      replay_nodes(call.graph, call.detached, call.no_grad, values);
    } catch (...) {
      autograd::GradMode::set_enabled(was_enabled);
      throw;
    }
    autograd::GradMode::set_enabled(was_enabled);
  }
  for (size_t k = 0; k < call.holders.size(); ++k) {
    Tensor result = values[call.graph.outputs[k]];
    {
      NoGradGuard no_grad;
      assign_value(call.holders[k], result);
    }
    if (!result.requires_grad()) continue;
    if (result.is_leaf()) {  // an op that returned its operand: give the holder a node of its own
      EnableGradGuard enable;
      result = result.view(result.sizes());
    }
    // The holder takes the eager result's place in the autograd graph.
    auto &meta = call.holders[k].impl()->autograd;
    meta.grad_fn = result.impl()->autograd.grad_fn;
    meta.output_nr = result.impl()->autograd.output_nr;
  }
}

std::shared_ptr<CompiledModule::Segment> CompiledModule::trace_and_compile_segment(const SegmentCall &call) {
  // Re-trace the segment with eager ops on leaf copies of its inputs, with
  // autograd, to get the joint forward+backward graph (AOTAutograd per
  // segment, as TorchDynamo does for each subgraph).
  auto segment = std::make_shared<Segment>();
  segment->artifact = std::make_shared<Artifact>();
  segment->num_ops = static_cast<int>(call.graph.nodes.size());
  Artifact &artifact = *segment->artifact;
  const ir::Graph &graph = call.graph;
  trace::Tracer tracer;
  std::vector<Tensor> values(graph.values.size());
  std::vector<Tensor> targets;
  std::vector<Tensor> outputs, grads;
  {
    EnableGradGuard enable;
    trace::TracingScope scope(&tracer);
    for (size_t i = 0; i < call.inputs.size(); ++i) {
      Tensor leaf = call.inputs[i].detach();
      if (call.grad_enabled && call.inputs[i].requires_grad()) {
        leaf.requires_grad_(true);
        targets.push_back(leaf);
        artifact.grad_inputs.push_back(static_cast<int>(i));
      }
      tracer.add_user_input(leaf);
      values[graph.inputs[i]] = leaf;
    }
    replay_nodes(graph, call.detached, call.no_grad, values);
    std::vector<Tensor> with_grad, tangents;
    for (size_t k = 0; k < graph.outputs.size(); ++k) {
      outputs.push_back(values[graph.outputs[k]]);
      if (outputs.back().requires_grad()) {
        segment->grad_outputs.push_back(static_cast<int>(k));
        with_grad.push_back(outputs.back());
        Tensor tangent;
        {
          trace::PauseTracing pause;
          tangent = ones_like(outputs.back());
        }
        tracer.add_tangent(tangent);
        tangents.push_back(tangent);
      }
    }
    if (!targets.empty() && !with_grad.empty()) {
      const std::vector<int> positions = artifact.grad_inputs;
      const auto reach = gradient_reach(with_grad, targets);
      grads = defined_gradients(autograd::grad(with_grad, tangents, targets), artifact.grad_inputs);
      for (const auto &row : reach) {  // keep the columns of the targets that got a gradient
        std::vector<bool> kept;
        for (int pos : artifact.grad_inputs)
          kept.push_back(row[std::find(positions.begin(), positions.end(), pos) - positions.begin()]);
        segment->reach.push_back(std::move(kept));
      }
    } else {
      artifact.grad_inputs.clear();
    }
  }
  artifact.traced = tracer.finish(outputs, grads);
  // A checkpointed segment (the user's autograd::checkpoint) saves nothing
  // but its inputs and recomputes its whole forward in backward: kiln-remat
  // with memory budget 0.
  codegen::CompileOptions copts = codegen_options(*module_, options_, stats_, segment_device(call.inputs));
  if (call.checkpointed) {
    copts.remat = true;
    copts.memory_budget = 0.0;
  }
  std::string error;
  auto start = std::chrono::steady_clock::now();
  bool ok = codegen::compileGraph(artifact.traced, copts, &artifact.graph, &error);
  KILN_CHECK(ok, "kiln::compile: compiling a graph-break segment of ", name(), " failed: ", error);
  stats_.last_compile_seconds = seconds_since(start);
  ++stats_.compiles;
  ++stats_.graph_break_segments;
  return segment;
}

}  // namespace kiln
