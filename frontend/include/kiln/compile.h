// kiln/compile.h - kiln::compile: capture, compile and run a module or any
// callable (see "Several inputs and outputs" and "Compiling a function").
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
// Graph breaks (as TorchDynamo's): an op that cannot be captured (.item(),
// in-place updates other than of captured buffers, an empty narrow / slice,
// a cat / stack of integer, bool or empty tensors, a user callback that reads
// values; a non-empty window is captured as kiln.gather, a float cat as
// kiln.scatter_add)
// splits the graph. C++ cannot resume a function half-way, so such a
// module's forward then runs on every call under a *lazy* tracer: ops are
// recorded without computing, and at each break the segment recorded so far
// is compiled (once, cached by its exact graph) and run, every tensor the
// forward still holds gets its value, the op runs eagerly, and recording
// resumes. Each segment is re-traced with autograd for its own compiled
// backward (AOTAutograd per subgraph), so loss.backward() flows through the
// segments and the eager ops between them. KILN_LOG=graph_breaks prints
// where and why; CompiledModule::graph_breaks() lists the ops of the last
// call. Segments are compiled with static shapes, once per distinct
// segment graph; at each position of the call (the k-th segment) at most
// cache_size_limit graphs are compiled, later new ones run eagerly (one
// warning), and KILN_LOG=recompiles says what changed (a constant such as an
// item() value used in arithmetic, an input shape). The ops of an
// autograd::checkpoint region form a segment of their own that saves only
// its inputs and recomputes its forward in backward, as eager checkpointing
// does (an op that breaks the graph inside the region runs eagerly and
// keeps what it saves). CompileStats' memory fields then sum the last call's
// segments. Ops are recorded
// on every call, so a module with breaks pays the per-op recording cost (no
// kernel math) on top of its compiled segments. Host reads inside forward:
// item() is a break and to_vector() of a computed value flushes the segment
// first; raw pointers (data_ptr/raw_data) are not tracked, so do not read
// values through them inside a compiled forward.
// Errors: compiler failures throw kiln::Error with the compiler's diagnostic.
// Guards: input shape, dtype, device, requires_grad; training mode; grad
// mode; the parameters' requires_grad flags; which tensors the parameters
// and buffers are, and their shapes and dtypes (replace_module, set_data of
// another shape, Module::to(dtype) recompile); CompileOptions::autocast;
// CompileOptions::guard_scalars. Random ops (dropout) are graph
// inputs redrawn from the default generator on every call, so compiled and
// eager runs with the same seed use the same masks.
// Dynamic shapes (CompileOptions::automatic_dynamic_shapes, on by default):
// when a call misses only because one input dim changed (e.g. the batch
// size, both sizes >= 2), the model is traced at the new size and the two
// traces are fitted to one graph whose sizes and size-derived constants are
// monomials of a symbol s (kiln/ir/DynamicShapes.h). It is compiled once
// with shape-generic kernels (`?` dims, runtime scalars such as a mean's
// 1/N); every later size of that dim instantiates the graph and binds the
// same kernels, without tracing or LLVM (CompileStats::dynamic_instantiations).
// If the traces do not fit (different ops, a size like s + 1, a tensor
// created inside forward with a size-dependent shape), the dim stays static.
// Memory: CompileOptions::memory_budget trades saved activations for
// recomputation in backward (passes/DESIGN.md, kiln-remat).
// Baked in at trace time (not guarded, C++ cannot inspect a closure or a
// member): every C++ scalar the forward uses (a `double scale` member, a
// captured variable, an option such as a dropout p or an eps) and every
// decision made on host values (an `if` on a member flag). A cached call
// whose scalar changed returns the result for the value seen at trace time.
// To change such a value between calls, pass it as a tensor: keep it in a
// registered buffer (e.g. a 0-d tensor) and update it in place (fill_ under
// NoGradGuard); the compiled graph reads buffers and parameters by reference
// on every call, without recompiling. Or name the scalars in
// CompileOptions::guard_scalars, so a change recompiles. (A module with
// graph breaks records its ops on every call, so it sees new values, and an
// item() value used in arithmetic recompiles its segment.)
// Several inputs and outputs: a module whose forward takes several tensors
// overrides nn::Module's `std::vector<Tensor> forward(const std::vector<Tensor>&)`
// and compile(module)->forward({x, mask}) compiles it; each input tensor is
// guarded as the one input above (shape, dtype, device, requires_grad), the
// number of tensors is fixed by the first call (another count: kiln::Error).
// Every output gets a grad_fn running one compiled backward for all outputs
// (AOTAutograd's CompiledFunction): an output whose gradient is not used
// gets a zero tangent, and a tensor only such outputs reach gets no .grad,
// as in eager. Automatic dynamic shapes serve one-input calls only; with
// several tensors each new shape compiles a static artifact.
// Compiling a function (kiln::compile(fn), kiln/compile_function.h): any
// callable taking Tensors and int / double / bool / std::string values,
// returning a Tensor, a std::vector<Tensor> or a std::tuple of Tensors.
// Guarded: each tensor argument as above; each non-tensor argument by value
// (a changed value compiles a new artifact, counted toward
// cache_size_limit; KILN_LOG=recompiles says "argument 2 (int) changed 3 ->
// 4"); grad and autocast mode. Found while tracing: every tensor the trace
// reads that is not an argument is bound by reference on every call (a
// leaf requiring grad is a parameter: its gradient comes out of the compiled
// backward into .grad; others are constants/buffers read each call); the
// outermost live modules owning those tensors (nn/module_registry.h: the
// module that registered a tensor and the parents holding it) are guarded
// per artifact: the identity, shape and dtype of every parameter and buffer
// and their requires_grad flags (replace_module, Module::to(dtype),
// set_data of another shape, requires_grad_(false)), train()/eval(), and
// whether the module still lives (a captured `std::shared_ptr` assigned a
// new model destroys the old one: recompile). A tensor the function reads
// that no module registered (a free tensor captured by the lambda) is bound
// by identity: its shape, dtype and requires_grad are guarded, reassigning
// the C++ variable to another tensor is not seen (update it in place, or
// make it an argument). Baked in as for modules: C++ scalars the closure
// captures (use an argument, which is guarded) and host decisions.
// backward() is called outside the compiled function (torch.compile's common
// usage): a trace cannot record .grad accumulation or an optimizer's in-place
// update as graph outputs, so a step function returns the loss and the
// caller runs `loss.backward(); opt.step();`, which runs the compiled backward.
// An undefined tensor argument throws kiln::Error naming it ("argument 1");
// when a new trace fails after a guard changed (e.g. float labels for
// cross_entropy), the error says which argument changed.
// Environment: KILN_DUMP_IR=dir writes the IR after each pipeline stage;
// KILN_LOG=recompiles prints which guard changed when a new artifact is
// compiled, when a dim becomes dynamic and when a size reuses it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/nn.h"

namespace kiln {

/// A pass of the caller's own that joins kiln::compile's pipeline at a named
/// point (as Inductor's joint_custom_pre_pass / post_grad_custom_post_pass).
/// `pipeline` is a textual MLIR pass pipeline over the module
/// ("my-pass{threshold=2}", "canonicalize,my-pass"), whose passes must be
/// in the MLIR pass registry when compile() runs: a pass developer
/// registers them from their own code (mlir::PassRegistration<MyPass>, or
/// the registerXPass() that ODS generates), so no MLIR type appears here.
/// The stages, in order: canonicalize, cse, autocast, remat, partition,
/// fuse (kiln/passes/Pipeline.h; the module holds func @joint up to
/// partition, then @forward and @backward). A pass at a stage that is
/// switched off (autocast off, remat off) still runs at that point.
/// Errors (an unknown stage, a pass not registered, a pass that fails):
/// kiln::Error from the first call, with the pipeline's diagnostic.
struct CustomPass {
  enum class Position { Before, After };
  std::string stage;                     ///< a stage name above
  Position position = Position::After;   ///< before or after that stage
  std::string pipeline;                  ///< the passes, as mlir-opt's --pass-pipeline text (without builtin.module())
};

struct CompileOptions {
  /// Directory for IR dumps (defaults to $KILN_DUMP_IR).
  std::string dump_ir_dir;
  /// Compiled artifacts kept per module (torch._dynamo's cache_size_limit);
  /// beyond it new guard keys run eagerly, with one warning.
  int cache_size_limit = 8;
  /// Automatic dynamic shapes (torch._dynamo's automatic_dynamic_shapes):
  /// when a call misses only because one input dim changed (both sizes >= 2;
  /// sizes 0 and 1 are specialized, as in PyTorch, and always get their own
  /// static artifact),
  /// that dim becomes a symbol s: the graph is compiled once with
  /// shape-generic kernels (`?` dims), and every later size of it reuses them
  /// (CompileStats::dynamic_instantiations) without tracing or LLVM.
  bool automatic_dynamic_shapes = true;
  /// Activation checkpointing by min-cut rematerialization (the kiln-remat
  /// pass; torch._functorch.config.activation_memory_budget). In [0, 1]:
  /// 1 saves what the min-cut over cheap ops (pointwise, views, casts) saves,
  /// recomputing those in backward; 0 saves nothing but the inputs and
  /// recomputes the whole forward (matmuls included) in backward; in between
  /// it is the fraction of budget 1's peak activation memory (bytes saved
  /// for backward + the larger of the forward and backward arenas, as
  /// CompileStats reports them) to stay within, at the least estimated
  /// step time; when no cut fits, the one with the smallest peak
  /// (passes/DESIGN.md, kiln-remat). Dropout masks are graph inputs, so
  /// recomputation reuses them bit for bit. Outside [0, 1] (or NaN):
  /// kiln::Error from compile().
  double memory_budget = 1.0;
  /// false: no kiln-remat; backward loads every forward value it needs except
  /// views and constants (AOTAutograd's default_partition).
  bool remat = true;
  /// Mixed precision (torch.autocast for the compiled graph): kBFloat16 or
  /// kFloat16 runs matmuls, forward and backward, in that type (oneDNN bf16
  /// GEMMs; f16 GEMMs are computed in f32 on CPUs), reductions, exp/log/pow
  /// and norms in float32, and promotes mixed inputs; parameters, outputs and
  /// gradients keep their dtypes (float32 master weights). The op lists are
  /// kiln::ir::autocastPolicy (ir/AutocastPolicy.h). kFloat32 (default): off.
  /// Other dtypes: the first call throws kiln::Error.
  DType autocast = kFloat32;
  /// C++ scalars the forward bakes into the graph (members, closure
  /// captures), read before every call and guarded: a call whose values
  /// differ from every compiled artifact's recompiles (counting toward
  /// cache_size_limit). Example: `opts.guard_scalars = [m] { return
  /// std::vector<double>{m->scale}; };`. Prefer a buffer tensor for a value
  /// that changes often (see "Baked in at trace time" above). Unset: none.
  std::function<std::vector<double>()> guard_scalars;
  /// Passes of the caller's own, run at their points in order (CustomPass).
  /// Not guarded: set them before the first call.
  std::vector<CustomPass> custom_passes;
  /// CUDA graphs (torch.compile's mode="reduce-overhead", issue 16 item 3):
  /// on a CUDA device, a static-shape compiled forward or backward is run
  /// with stream launches once (warm-up: kernels loaded, GEMM heuristics
  /// cached), then captured once into a runtime::cuda::CudaGraph on a
  /// private capture stream and replayed on every later call, on the
  /// thread's current stream. Memory: ONE private graph pool per compiled
  /// function, shared by the graphs of all its shapes (bounded, as a
  /// torch.compile graph tree); it goes back when the compiled function is
  /// dropped. Inputs whose addresses differ from the captured ones are
  /// copied (device to device, on the run stream) into the graph's static
  /// inputs; outputs are copied out of the graph's static outputs into
  /// fresh buffers before they are handed out, so a later replay never
  /// overwrites a tensor the caller holds (unlike PyTorch's documented
  /// "outputs are overwritten by the next replay"; the copy costs one
  /// device-to-device copy per output). Fallback: a capture that fails
  /// (an op that cannot be captured or synchronizes the stream; index
  /// checks are read after each replay, the simulator's CPU fallbacks are
  /// captured as host functions) runs that shape with stream launches from
  /// then on, with the reason in kiln::explain ("fell back to stream
  /// launches: <reason>"). Graph-break segments: stream launches. Shape-generic
  /// (automatic dynamic) artifacts never use CUDA graphs (explain says so).
  /// CPU and other devices: ignored. false: stream launches always.
  bool cuda_graphs = true;
};

/// Statistics of the compiled artifacts (for tests and reports).
struct CompileStats {
  int compiles = 0;   ///< artifacts built (cache misses)
  int cache_hits = 0; ///< calls served by a cached artifact
  int num_fusions = 0;       ///< kernels in the last artifact
  int64_t arena_bytes = 0;   ///< planned intermediate bytes of the last forward+backward
  /// The two parts of arena_bytes; backward's is its plan with the saved
  /// activations donated (Executable::run_donating, what a backward without
  /// retain_graph runs), intermediates inside dead saved buffers not counted.
  int64_t forward_arena_bytes = 0, backward_arena_bytes = 0;
  int64_t saved_bytes = 0;      ///< bytes the last forward saves for backward (not counting its outputs)
  int64_t recompute_flops = 0;  ///< FLOPs the last backward spends recomputing forward ops
  /// Peak activation memory of the last forward+backward as planned, in
  /// bytes: the saved bytes (held from forward's start to backward's end)
  /// plus the larger arena — the unit of CompileOptions::memory_budget.
  int64_t peak_activation_bytes() const {
    return saved_bytes + (forward_arena_bytes > backward_arena_bytes ? forward_arena_bytes : backward_arena_bytes);
  }
  double last_compile_seconds = 0.0;
  int eager_fallbacks = 0;   ///< calls (or segments) run eagerly: the cache was full, or int32 values
  int dynamic_instantiations = 0;  ///< new sizes served by a shape-generic artifact (no compile)
  int graph_break_segments = 0;    ///< segments compiled so far (all calls) for a graph split by graph breaks
  /// CompileOptions::cuda_graphs, summed over forward and backward of all
  /// artifacts: graphs captured, runs served by a replay, captures that
  /// failed (their shapes then run with stream launches).
  int cuda_graph_captures = 0, cuda_graph_replays = 0, cuda_graph_fallbacks = 0;
  /// Bytes reserved by this compiled function's one CUDA graph pool (0: none).
  int64_t cuda_graph_pool_bytes = 0;
};

namespace detail {
/// A non-tensor argument of a compiled function, guarded by value: a call
/// with another value compiles (or finds) another artifact.
struct ScalarArg {
  std::string name;   ///< "argument 2"
  std::string type;   ///< "int", "double", "bool", "string"
  std::string value;  ///< printed exactly (doubles with 17 digits, strings quoted)
};
/// One call of a compiled module or function, type-erased: the tensors, the
/// non-tensor arguments, and `body`, which runs the user's code on tensors
/// standing for `inputs` (the traced copies while tracing, the real tensors
/// when run eagerly or as graph-break segments) and returns its outputs.
struct CallSpec {
  std::vector<Tensor> inputs;
  std::vector<std::string> input_names;  ///< for messages: "input", "input 1", "argument 0"
  std::vector<ScalarArg> scalars;
  std::function<std::vector<Tensor>(const std::vector<Tensor> &)> body;
};
}  // namespace detail

struct GuardKey;  // compile.cpp: everything an artifact specializes on
namespace trace {
class Tracer;
}
namespace ir {
struct Graph;
}
namespace codegen::perf {
struct KernelPerf;  // kiln/codegen/PerfModel.h
}

class CompiledModule : public nn::Module {
public:
  /// What is compiled: a module's forward (its parameters and buffers are
  /// guarded through the module), or a function (kiln::compile(fn); the
  /// modules and tensors its traces read are found and guarded per artifact).
  enum class Kind { Module, Function };
  CompiledModule(std::shared_ptr<nn::Module> module, CompileOptions options, Kind kind = Kind::Module);
  ~CompiledModule() override;
  /// The one-tensor form: module.forward(input), compiled.
  Tensor forward(const Tensor &input) override;
  /// Several tensors in and out: module.forward(inputs), compiled (the
  /// vector form of nn::Module::forward). The number of tensors is fixed by
  /// the first call: another count throws kiln::Error naming both; an
  /// undefined tensor throws naming "input <i>".
  std::vector<Tensor> forward(const std::vector<Tensor> &inputs) override;
  /// The engine under both forms and kiln::compile(fn): guard, find or build
  /// the artifact, run it. Throws kiln::Error naming the argument for an
  /// undefined tensor or inputs on several devices.
  std::vector<Tensor> call_compiled(detail::CallSpec &call);
  std::string name() const override { return "Compiled" + module_->name(); }
  nn::Module &eager_module() override { return module_->eager_module(); }
  /// (Out of line: folds in the CUDA graph counters of the executables.)
  const CompileStats &stats() const;
  nn::Module &original() { return *module_; }
  /// The module compiled (what kiln::export_compiled and kiln::onnx::export_model trace for a CompiledModule).
  std::shared_ptr<nn::Module> original_module() const { return module_; }
  /// The report of explain() for the artifact serving `input` (nullopt-like
  /// empty string if none is compiled for it yet).
  std::string describe(const Tensor &input) const;
  /// The static performance records of every launch of the artifact
  /// serving `input` (forward, then backward; empty if none is compiled for
  /// it yet, or the module has graph breaks): bytes, FLOPs, ptxas'
  /// registers and spills, occupancy and roofline time on an H200
  /// (kiln/codegen/PerfReport.h; include kiln/codegen/PerfModel.h to read
  /// them). Meaningful for CUDA inputs (the CUDA target's kernels).
  std::vector<codegen::perf::KernelPerf> kernel_perf(const Tensor &input) const;
  /// The same for the artifact serving a call forward(inputs).
  std::vector<codegen::perf::KernelPerf> kernel_perf(const std::vector<Tensor> &inputs) const;

  struct Artifact;
  struct Guard;
  struct DynamicFamily;
  struct Segment;

  /// Ops at which the last call's graph was split (graph breaks), in order.
  const std::vector<std::string> &graph_breaks() const { return last_breaks_; }

private:
  struct SegmentCall;
  struct SegmentSite;
  std::vector<Tensor> forward_segments(detail::CallSpec &call);
  /// The cached artifact for `key`, or nullptr on a miss; for a function,
  /// an artifact whose found modules or tensors changed is a miss (`why`).
  std::shared_ptr<Artifact> cached_artifact(const std::string &key, std::string *why);
  /// Runs a found artifact: binds inputs, captured tensors and random draws,
  /// returns the outputs with a grad_fn running the compiled backward.
  std::vector<Tensor> run_artifact(const std::shared_ptr<Artifact> &artifact, const detail::CallSpec &call);
  Kind kind_ = Kind::Module;
  int num_inputs_ = -1;  ///< tensors per call of the vector form (fixed by the first call)
  void flush_segment(trace::Tracer &tracer, bool grad_enabled, const char *op);
  /// The compiled segment for `call` (compiled now if new), or nullptr when
  /// its position is past cache_size_limit (then it runs eagerly).
  std::shared_ptr<Segment> find_segment(const SegmentCall &call, const char *op);
  /// Re-traces a flushed segment with autograd and compiles its joint graph.
  std::shared_ptr<Segment> trace_and_compile_segment(const SegmentCall &call);
  void run_segment(const Segment &segment, SegmentCall &call);
  void run_segment_eagerly(SegmentCall &call);
  /// The gradients of `call`'s inputs `grad_inputs` computed eagerly (replay
  /// with autograd) from the defined gradients of its outputs `grad_outputs`
  /// (CompiledBackward::eager_backward).
  static std::function<std::vector<Tensor>(const std::vector<Tensor> &)> segment_eager_backward(
      const SegmentCall &call, const std::vector<int> &grad_outputs, const std::vector<int> &grad_inputs);
  bool graph_breaks_ = false;  ///< the whole graph hit an uncapturable op: run as segments
  std::map<std::string, std::shared_ptr<Segment>> segments_;
  std::vector<std::shared_ptr<SegmentSite>> sites_;  ///< per flush position of a call
  int next_site_ = 0;                                 ///< position of the next flush in this call
  bool warned_segment_limit_ = false;
  std::set<std::string> eager_keys_;  ///< guard keys whose graph has a dtype the compiler lacks (run eagerly)
  void warn_uncompilable(const char *type);
  bool warned_uncompilable_ = false;
  std::vector<std::string> last_breaks_;
  std::vector<std::string> recompile_reasons_;  ///< why each artifact after the first was compiled
  /// The artifact for a guard key that missed the cache: an instance of a
  /// dynamic family, or traced and compiled (shape-generic or static); null
  /// when the call runs eagerly (cache_size_limit, graph break, int32).
  std::shared_ptr<Artifact> build_artifact(detail::CallSpec &call, const GuardKey &guard, bool grad_enabled,
                                           const std::string &state_change);
  /// Fits `artifact`'s graph and `previous`'s to one symbolic graph over
  /// input dim `dim` and compiles its shape-generic kernels (false + why).
  bool compile_artifact_dynamic(Artifact &artifact, const Artifact &previous, int dim, std::string *why);
  std::shared_ptr<Artifact> instantiate(const DynamicFamily &family, int64_t s, std::string *why);
  std::vector<std::shared_ptr<DynamicFamily>> families_;
  std::shared_ptr<Guard> last_guard_;  ///< guards of the previous call (recompile reasons)
  bool warned_cache_limit_ = false;
  std::shared_ptr<nn::Module> module_;
  CompileOptions options_;
  std::map<std::string, std::shared_ptr<Artifact>> cache_;
  mutable CompileStats stats_;
public:
  struct CudaGraphs; ///< CompileOptions::cuda_graphs: the pool, capture stream, counters, notes (compile/cuda_graphs.h)
private:
  /// The guard key of a call with `inputs` (forward's names), and the artifact serving it (or null).
  GuardKey guard_of(const std::vector<Tensor> &inputs) const;
  const Artifact *artifact_for(const GuardKey &guard) const;
  std::shared_ptr<CudaGraphs> cuda_graphs_;
  void use_cuda_graphs(Artifact &artifact);
};

/// Runs `model` on `input` (compiling for that guard key if needed) and
/// returns a report: the guards, recompiles and their reasons so far, the
/// fusion groups of the forward and backward (ops, bytes read/written), the
/// values saved for backward (count, bytes) and the forward ops backward
/// recomputes (count per op, FLOPs; see memory_budget), the
/// memory plan (planned arena bytes per function), kernel-cache use and
/// compile time; for a CUDA input also the static performance report of
/// every launch (kernel_perf: bytes, FLOPs, registers and spills from ptxas,
/// occupancy, roofline time on an H200, per function and in total). For a module with graph breaks: the ops it breaks at and the
/// segments compiled. Also printed to stderr when `print` is set.
std::string explain(CompiledModule &model, const Tensor &input, bool print = true);

/// Runs `model` on `input` and returns CompiledModule::kernel_perf(input).
std::vector<codegen::perf::KernelPerf> kernel_perf(CompiledModule &model, const Tensor &input);

/// Wraps `module` (its parameters appear as "_orig_mod.<name>", as in PyTorch).
std::shared_ptr<CompiledModule> compile(std::shared_ptr<nn::Module> module, CompileOptions options = {});

}  // namespace kiln

#include "kiln/compile_function.h"  // kiln::compile(fn): CompiledFunction
