// compile/explain.cpp - CompiledModule::describe and kiln::explain: the
// report of what kiln::compile built for an input.
#include <cstdio>
#include <sstream>

#include "compile/artifact.h"
#include "compile/cuda_graphs.h"
#include "kiln/codegen/PerfReport.h"

namespace kiln {

GuardKey CompiledModule::guard_of(const std::vector<Tensor> &inputs) const {
  detail::CallSpec call;
  call.inputs = inputs;
  for (size_t i = 0; i < inputs.size(); ++i)  // as CompiledModule::forward names them
    call.input_names.push_back(inputs.size() == 1 ? std::string("input") : "input " + std::to_string(i));
  return GuardKey::of(call, is_training(), autograd::GradMode::is_enabled(), *module_, options_.autocast,
                      options_.guard_scalars);
}

const CompiledModule::Artifact *CompiledModule::artifact_for(const GuardKey &guard) const {
  auto it = cache_.find(guard.str());
  return it == cache_.end() ? nullptr : it->second.get();
}

std::string CompiledModule::describe(const Tensor &input) const {
  if (graph_breaks_) {
    std::ostringstream os;
    os << "kiln::explain " << name() << "\n  graph breaks: " << last_breaks_.size() << " (";
    for (size_t i = 0; i < last_breaks_.size(); ++i) os << (i ? ", " : "") << last_breaks_[i];
    os << "): the forward runs as compiled segments split at these ops, which run eagerly\n"
       << "  segments compiled: " << stats_.graph_break_segments << ", cached calls: " << stats_.cache_hits
       << ", eager runs past cache_size_limit: " << stats_.eager_fallbacks << "\n";
    for (size_t i = 0; i < recompile_reasons_.size(); ++i)
      os << "  recompile " << i + 1 << ": " << recompile_reasons_[i] << "\n";
    int k = 0;
    for (const auto &[key, segment] : segments_) {
      const codegen::CompiledGraph &g = segment->artifact->graph;
      os << "    segment " << ++k << ": " << segment->num_ops << " ops -> " << g.fusions.size() << " kernels, "
         << (g.backward ? "forward + backward" : "forward only") << ", arena " << g.forward->arena_bytes()
         << (g.backward ? " + " + std::to_string(g.backward->arena_bytes()) : std::string()) << " bytes, compiled in "
         << g.compile_seconds << " s\n";
    }
    return os.str();
  }
  const GuardKey guard = guard_of({input});
  const Artifact *artifact = artifact_for(guard);
  if (!artifact) {
    // No artifact for this one input (e.g. a call of several inputs): the
    // CUDA graph section, which covers every artifact, is still reported.
    if (cuda_graphs_) return "kiln::explain " + name() + " (no artifact for this single input)\n  " + cuda_graphs_->report();
    return std::string();
  }
  const codegen::CompiledGraph &g = artifact->graph;
  std::ostringstream os;
  os << "kiln::explain " << name() << "\n";
  os << "  guards: " << guard.str() << "\n";
  for (size_t i = 0; i < recompile_reasons_.size(); ++i)
    os << "  recompile " << i + 1 << ": " << recompile_reasons_[i] << "\n";
  os << "  artifacts: " << stats_.compiles << " compiled, " << stats_.cache_hits << " cached calls, "
     << stats_.eager_fallbacks << " eager fallbacks (cache_size_limit " << options_.cache_size_limit << ")\n";
  os << "  graph breaks: none\n";
  if (g.dynamic)
    for (const auto &family : families_)
      if (guard.str(family->dim) == family->key) {
        os << "  dynamic shapes: input dim " << family->dim << " is symbolic s (" << family->key << "); sizes served by it:";
        for (int64_t size : family->sizes) os << " " << size;
        os << "; " << g.num_generic_kernels << " shape-generic kernels\n";
      }
  os << "  compile: " << g.compile_seconds << " s (pipeline " << g.pipeline_seconds << ", MLIR lowering "
     << g.mlir_lowering_seconds << ", LLVM " << g.llvm_seconds << ")" << (g.kernel_cache_hit ? ", kernel cache hit" : "")
     << "\n";
  os << "  saved for backward: " << g.num_saved << " values, " << g.saved_bytes
     << " bytes; random inputs (dropout masks): " << artifact->random_draws.size() << "\n";
  os << "  rematerialization: ";
  if (options_.remat)
    os << "memory budget " << options_.memory_budget;
  else
    os << "off";
  os << "; backward recomputes ";
  int64_t recomputed = 0;
  for (const auto &[op, count] : g.recomputed_ops) recomputed += count;
  os << recomputed << " forward ops, " << g.recompute_flops << " FLOPs";
  const char *sep = " (";
  for (const auto &[op, count] : g.recomputed_ops) {
    os << sep << op << " x" << count;
    sep = ", ";
  }
  os << (g.recomputed_ops.empty() ? "" : ")") << "\n";
  if (g.remat_peak_bytes >= 0)
    os << "  estimated peak activation memory: " << g.remat_peak_bytes << " bytes (target " << g.remat_target_bytes
       << " = memory budget x " << g.remat_fastest_peak_bytes << ", budget 1's)\n";
  os << "  memory plan: forward arena " << g.forward->arena_bytes() << " bytes, " << g.forward->num_launches()
     << " launches";
  if (g.backward) {
    os << "; backward arena " << g.backward->arena_bytes() << " bytes";
    if (g.backward->donating_arena_bytes() != g.backward->arena_bytes())
      os << " (" << g.backward->donating_arena_bytes() << " with the saved activations donated)";
    os << ", " << g.backward->num_launches() << " launches";
  }
  if (!g.gemm_epilogues.empty()) {
    os << "\n  GEMM epilogues (fused into the GEMM's store):";
    for (const std::string &folded : g.gemm_epilogues) os << " " << folded << ";";
  }
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
  if (input.device().type == DeviceType::CUDA) os << codegen::formatPerfReport(codegen::kernelPerfRecords(g), "  ");
  if (cuda_graphs_) os << "  " << cuda_graphs_->report();
  else if (!options_.cuda_graphs && input.device().type == DeviceType::CUDA)
    os << "  cuda graphs: off (CompileOptions::cuda_graphs = false): stream launches\n";
  return os.str();
}

std::vector<codegen::perf::KernelPerf> CompiledModule::kernel_perf(const Tensor &input) const {
  return kernel_perf(std::vector<Tensor>{input});
}

std::vector<codegen::perf::KernelPerf> CompiledModule::kernel_perf(const std::vector<Tensor> &inputs) const {
  if (graph_breaks_) return {};
  const Artifact *artifact = artifact_for(guard_of(inputs));
  return artifact ? codegen::kernelPerfRecords(artifact->graph) : std::vector<codegen::perf::KernelPerf>{};
}

std::vector<codegen::perf::KernelPerf> kernel_perf(CompiledModule &model, const Tensor &input) {
  model.forward(input);
  return model.kernel_perf(input);
}

std::string explain(CompiledModule &model, const Tensor &input, bool print) {
  model.forward(input);
  std::string report = model.describe(input);
  if (report.empty()) report = "kiln::explain " + model.name() + ": this input ran eagerly (cache_size_limit reached)\n";
  if (print) std::fputs(report.c_str(), stderr);
  return report;
}

}  // namespace kiln
