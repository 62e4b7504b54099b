// kiln/compile.h - kiln::compile: capture, compile and run a module.
//
// compile(model) returns a Module that, on the first call for a guard key
// (input shapes, dtypes, requires_grad flags, training mode, grad mode),
// runs the model's forward AND its backward once under a tracer (the
// backward is traced with the output gradient as a graph input, as
// AOTAutograd does), compiles the joint graph through the `kiln` MLIR
// dialect (passes/Pipeline.h: canonicalize, CSE, partition into forward and
// backward, fusion) to JIT kernels + oneDNN GEMMs, and caches it. Later calls
// with the same key run the compiled forward; its output carries a grad_fn
// that runs the compiled backward, so `loss.backward(); opt.step();` is
// unchanged.
//
// Errors: an op that cannot be captured yet throws kiln::Error naming it;
// compiler failures throw kiln::Error with the compiler's diagnostic.
// Guards: input shape, dtype, device, requires_grad; training mode; grad
// mode; the parameters' requires_grad flags; CompileOptions::autocast. Random ops (dropout) are graph
// inputs redrawn from the default generator on every call, so compiled and
// eager runs with the same seed use the same masks.
// Environment: KILN_DUMP_IR=dir writes the IR after each pipeline stage;
// KILN_LOG=recompiles prints which guard changed when a new artifact is compiled.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn.h"

namespace kiln {

struct CompileOptions {
  /// Directory for IR dumps (defaults to $KILN_DUMP_IR).
  std::string dump_ir_dir;
  /// Compiled artifacts kept per module (torch._dynamo's cache_size_limit);
  /// beyond it new guard keys run eagerly, with one warning.
  int cache_size_limit = 8;
  /// Mixed precision (torch.autocast for the compiled graph): kBFloat16 or
  /// kFloat16 runs matmuls, forward and backward, in that type (oneDNN bf16
  /// GEMMs; f16 GEMMs are computed in f32 on CPUs), reductions, exp/log/pow
  /// and norms in float32, and promotes mixed inputs; parameters, outputs and
  /// gradients keep their dtypes (float32 master weights). The op lists are
  /// kiln::ir::autocastPolicy (ir/AutocastPolicy.h). kFloat32 (default): off.
  /// Other dtypes: the first call throws kiln::Error.
  DType autocast = kFloat32;
};

/// Statistics of the compiled artifacts (for tests and reports).
struct CompileStats {
  int compiles = 0;   ///< artifacts built (cache misses)
  int cache_hits = 0; ///< calls served by a cached artifact
  int num_fusions = 0;       ///< kernels in the last artifact
  int64_t arena_bytes = 0;   ///< planned intermediate bytes of the last forward+backward
  double last_compile_seconds = 0.0;
  int eager_fallbacks = 0;   ///< calls run eagerly because the cache was full
};

class CompiledModule : public nn::Module {
public:
  CompiledModule(std::shared_ptr<nn::Module> module, CompileOptions options);
  ~CompiledModule() override;
  Tensor forward(const Tensor &input) override;
  std::string name() const override { return "Compiled" + module_->name(); }
  const CompileStats &stats() const { return stats_; }
  nn::Module &original() { return *module_; }
  /// The report of explain() for the artifact serving `input` (nullopt-like
  /// empty string if none is compiled for it yet).
  std::string describe(const Tensor &input) const;

  struct Artifact;
  struct Guard;

private:
  std::shared_ptr<Guard> last_guard_;  ///< guards of the previous call (recompile reasons)
  bool warned_cache_limit_ = false;
  std::shared_ptr<nn::Module> module_;
  CompileOptions options_;
  std::map<std::string, std::shared_ptr<Artifact>> cache_;
  CompileStats stats_;
};

/// Runs `model` on `input` (compiling for that guard key if needed) and
/// returns a report: the guards, recompiles and their reasons so far, the
/// fusion groups of the forward and backward (ops, bytes read/written), the
/// memory plan (planned arena bytes per function), kernel-cache use and
/// compile time. Graph breaks: none exist; an uncapturable op throws
/// kiln::Error naming it. Also printed to stderr when `print` is set.
std::string explain(CompiledModule &model, const Tensor &input, bool print = true);

/// Wraps `module` (its parameters appear as "_orig_mod.<name>", as in PyTorch).
std::shared_ptr<CompiledModule> compile(std::shared_ptr<nn::Module> module, CompileOptions options = {});

}  // namespace kiln
