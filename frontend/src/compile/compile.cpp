// kiln::compile: guard -> (trace -> compile) -> run the compiled forward, with
// a grad_fn that runs the compiled backward.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <set>
#include <sstream>

#include "kiln/amp.h"
#include "kiln/autograd.h"
#include "kiln/codegen/Compiler.h"
#include "kiln/ir/DynamicShapes.h"
#include "kiln/compile.h"
#include "kiln/ops.h"
#include "kiln/random.h"
#include "kiln/runtime/Profiler.h"
#include "compile/tracer.h"

namespace kiln {

/// One compiled graph and how to bind it.
struct CompiledModule::Artifact {
  codegen::CompiledGraph graph;
  std::shared_ptr<Guard> guard;     ///< the guards it was compiled for
  std::vector<Tensor> captured;     ///< bound by reference each call (parameters)
  std::vector<trace::RandomDraw> random_draws;  ///< redrawn each call (dropout masks)
  std::vector<Shape> random_shapes; ///< the shape of each draw
  std::vector<int> grad_inputs;     ///< primal positions that receive gradients
  std::vector<DType> output_types;  ///< forward outputs
  ir::Graph traced;                 ///< the graph, kept to fit a dynamic dim on a size change
};

/// Automatic dynamic shapes: one input dim is the symbol s; every size of it
/// (>= 2) is served by instantiating `symbolic` and binding the shared
/// shape-generic kernels, without tracing or LLVM.
struct CompiledModule::DynamicFamily {
  std::string key;                  ///< GuardKey::str() with the dynamic dim printed as "s"
  int dim = 0;                      ///< the input dim that is dynamic
  ir::SymbolicGraph symbolic;
  std::shared_ptr<const codegen::DynamicKernels> kernels;
  std::shared_ptr<Artifact> prototype;  ///< captured tensors, draws, grad inputs (graph unused)
  std::vector<int64_t> sizes;       ///< sizes it served so far, in order (not the static first one)
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

}  // namespace

/// Everything a compiled artifact specializes on; one field per guard.
struct GuardKey {
  Shape shape;
  DType dtype;
  Device device;
  bool requires_grad, training, grad_enabled;
  std::string params_requires_grad;  ///< '1'/'0' per parameter
  /// The precision casts run in: the eager kiln::autocast state when on (its
  /// casts are traced into the graph), else CompileOptions::autocast when not
  /// float32 (the kiln-autocast pass), else "" (off).
  std::string autocast;
  /// Identity, shape and dtype of every parameter and buffer: the compiled
  /// graph binds these tensors by reference, so one replaced (replace_module,
  /// Module::to(dtype)) or resized (set_data) must not reuse the artifact.
  std::string state;
  std::vector<double> user_scalars;  ///< CompileOptions::guard_scalars() of this call

  static GuardKey of(const Tensor &input, bool training, bool grad_enabled, const nn::Module &m,
                     DType compile_autocast, const std::function<std::vector<double>()> &guard_scalars) {
    GuardKey k{input.sizes(), input.dtype(), input.device(), input.requires_grad(), training, grad_enabled, {},
               autocast_enabled()                ? dtype_name(autocast_dtype())
               : compile_autocast != kFloat32 ? dtype_name(compile_autocast)
                                              : ""};
    for (const auto &p : m.parameters()) k.params_requires_grad += p.requires_grad() ? '1' : '0';
    k.state = state_signature(m);
    if (guard_scalars) k.user_scalars = guard_scalars();
    return k;
  }
  static std::string state_signature(const nn::Module &m) {
    std::ostringstream os;
    auto add = [&os](const Tensor &t) {
      os << static_cast<const void *>(t.impl()) << shape_str(t.sizes()) << dtype_name(t.dtype()) << ";";
    };
    for (const auto &p : m.parameters()) add(p);
    for (const auto &b : m.buffers()) add(b);
    return os.str();
  }
  /// The key as a string; `dynamic_dim` >= 0 prints that dim as "s".
  std::string str(int dynamic_dim = -1) const {
    std::ostringstream os;
    os << "input";
    if (dynamic_dim < 0) {
      os << shape_str(shape);
    } else {
      os << "[";
      for (size_t d = 0; d < shape.size(); ++d)
        os << (d ? ", " : "") << (static_cast<int>(d) == dynamic_dim ? std::string("s") : std::to_string(shape[d]));
      os << "]";
    }
    os << ":" << dtype_name(dtype) << ":" << device.str() << (requires_grad ? ":rg" : "")
       << " training=" << training << " grad=" << grad_enabled << " params=" << params_requires_grad
       << " state=" << std::hex << std::hash<std::string>{}(state) << std::dec;
    if (!user_scalars.empty()) {
      os << " scalars=" << std::hexfloat;
      for (double v : user_scalars) os << v << ",";
      os << std::defaultfloat;
    }
    if (!autocast.empty()) os << " autocast=" << autocast;
    return os.str();
  }
  /// The one input dim in which `this` differs from `old` when nothing else
  /// differs and both sizes are >= 2 (0 and 1 are specialized, as in
  /// PyTorch); -1 otherwise.
  int single_changed_dim(const GuardKey &old) const {
    if (dtype != old.dtype || device != old.device || requires_grad != old.requires_grad ||
        training != old.training || grad_enabled != old.grad_enabled ||
        params_requires_grad != old.params_requires_grad || autocast != old.autocast || state != old.state ||
        user_scalars != old.user_scalars ||
        shape.size() != old.shape.size())
      return -1;
    int changed = -1;
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] != old.shape[d]) {
        if (changed >= 0 || shape[d] < 2 || old.shape[d] < 2) return -1;
        changed = static_cast<int>(d);
      }
    return changed;
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
    if (state != old.state) add("a parameter or buffer was replaced or changed shape or dtype");
    if (user_scalars != old.user_scalars) {
      std::ostringstream values;
      for (size_t i = 0; i < user_scalars.size(); ++i) values << (i ? ", " : "") << user_scalars[i];
      add("CompileOptions::guard_scalars changed (now " + values.str() + ")");
    }
    if (autocast != old.autocast)
      add("autocast " + (old.autocast.empty() ? std::string("off") : old.autocast) + " -> " +
          (autocast.empty() ? std::string("off") : autocast));
    return os.str();
  }
};

namespace {

/// Runs the compiled backward: (primals..., saved..., tangents...) -> grads.
struct CompiledBackward : autograd::Node {
  std::shared_ptr<CompiledModule::Artifact> artifact;
  std::vector<runtime::TensorView> primals, saved;
  std::string module_name;  ///< for profiler events
  std::vector<Shape> output_shapes;
  std::vector<DType> output_types;
  /// Graph-break segments (several outputs): reach[k][i] tells whether a
  /// gradient flows from output k to gradient target i. A target that only
  /// outputs without a gradient this backward reach (a value computed and
  /// never used) gets none, as in eager. Empty: every target is reached.
  std::vector<std::vector<bool>> reach;
  /// Graph-break segments: the targets' gradients computed as eager would,
  /// by replaying the segment with autograd and differentiating only the
  /// outputs whose gradient is defined. Used when some are undefined and the
  /// compiled backward (which feeds those zeros) gives a non-finite value: a
  /// zero tangent times a NaN/Inf Jacobian (a value nobody uses downstream,
  /// computed from a NaN) is NaN where eager, which never runs that branch,
  /// gives a number.
  std::function<TensorList(const TensorList &grad_outputs)> eager_backward;

  TensorList apply(const TensorList &grad_outputs) override {
    KILN_CHECK(!released, "backward: trying to backward through the compiled graph a second time; its saved tensors "
               "were freed. Pass retain_graph=true to the first backward call");
    std::vector<runtime::TensorView> args = primals;
    // The last backward through this node hands the saved activations over
    // (args holds them alone): the executable reuses the memory of those
    // nothing else references after their last read (run_donating).
    const bool donate = releases_after_apply;
    args.insert(args.end(), saved.begin(), saved.end());
    for (size_t i = 0; i < grad_outputs.size(); ++i) {
      Tensor g = grad_outputs[i].defined() ? grad_outputs[i] : zeros(output_shapes[i], output_types[i]);
      args.push_back(to_view(g.to(output_types[i])));
    }
    std::string error;
    runtime::Profiler &profiler = runtime::Profiler::instance();
    const double start_us = profiler.now_us();
    if (donate) saved.clear();
    auto grads = donate ? artifact->graph.backward->run_donating(args, &error)
                        : artifact->graph.backward->run(args, &error);
    profiler.record("backward " + module_name, "step", start_us, profiler.now_us() - start_us);
    KILN_CHECK(error.empty(), "kiln::compile: compiled backward failed: ", error);
    TensorList out;
    for (size_t i = 0; i < grads.size(); ++i) out.push_back(reached(grad_outputs, i) ? from_view(grads[i]) : Tensor());
    if (eager_backward && needs_eager_backward(grad_outputs, out)) return eager_backward(grad_outputs);
    return out;
  }
  static bool needs_eager_backward(const TensorList &grad_outputs, const TensorList &grads) {
    bool some_undefined = false;
    for (const Tensor &g : grad_outputs) some_undefined |= !g.defined();
    if (!some_undefined) return false;
    for (const Tensor &g : grads)
      if (g.defined() && g.is_floating_point())
        for (double v : g.to_vector<double>())
          if (!std::isfinite(v)) return true;
    return false;
  }
  bool reached(const TensorList &grad_outputs, size_t target) const {
    if (reach.empty()) return true;
    for (size_t k = 0; k < grad_outputs.size(); ++k)
      if (grad_outputs[k].defined() && reach[k][target]) return true;
    return false;
  }
  std::string name() const override { return "CompiledFunctionBackward"; }
  void release_saved() override {
    saved.clear();
    released = true;
  }
  bool released = false;
};

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

/// Traces forward + backward of `module` on `input`: the artifact's graph,
/// captured tensors, random draws and gradient positions (not compiled yet).
std::shared_ptr<CompiledModule::Artifact> trace_module(nn::Module &module, const Tensor &input, bool with_backward) {
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
        grads = defined_gradients(autograd::grad({output}, {tangent}, targets), positions);
        artifact->grad_inputs = positions;
      }
    }
  }
  default_generator() = generator_before;
  artifact->traced = tracer.finish({output}, grads);
  artifact->captured = tracer.captured();
  artifact->random_draws = tracer.random_draws();
  const size_t first_random = 1 + artifact->captured.size();
  for (size_t i = 0; i < artifact->random_draws.size(); ++i)
    artifact->random_shapes.push_back(artifact->traced.values[artifact->traced.inputs[first_random + i]].shape);
  artifact->output_types = {output.dtype()};
  return artifact;
}

codegen::CompileOptions codegen_options(const nn::Module &module, const CompileOptions &options,
                                        const CompileStats &stats) {
  codegen::CompileOptions copts;
  copts.remat = options.remat;
  copts.memory_budget = options.memory_budget;
  copts.autocast = options.autocast;
  // One folder per compiled graph: <dir>/<Module>-<n>/NN-<stage>.mlir.
  if (!options.dump_ir_dir.empty())
    copts.dump_ir_dir = options.dump_ir_dir + "/" + module.name() + "-" + std::to_string(stats.compiles);
  return copts;
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
void compile_static(nn::Module &module, CompiledModule::Artifact &artifact, const CompileOptions &options,
                    CompileStats &stats) {
  std::string error;
  auto start = std::chrono::steady_clock::now();
  bool ok = codegen::compileGraph(artifact.traced, codegen_options(module, options, stats), &artifact.graph, &error);
  KILN_CHECK(ok, "kiln::compile: compiling ", module.name(), " failed: ", error,
             "\nRun the model eagerly (without kiln::compile) to work around this, and set KILN_DUMP_IR=<dir> "
             "to see the IR.");
  record_compile(artifact, seconds_since(start), stats);
}

/// Runs one node of a traced graph with the eager op that records it (the
/// graph-break segments are re-traced this way, with autograd, to get their
/// joint forward+backward graph).
Tensor run_node(const ir::Node &n, const std::vector<Tensor> &in, const ir::Value &result) {
  switch (n.kind) {
  case ir::OpKind::Add: return in[0] + in[1];
  case ir::OpKind::Sub: return in[0] - in[1];
  case ir::OpKind::Mul: return in[0] * in[1];
  case ir::OpKind::Div: return in[0] / in[1];
  case ir::OpKind::Neg: return neg(in[0]);
  case ir::OpKind::Exp: return exp(in[0]);
  case ir::OpKind::Log: return log(in[0]);
  case ir::OpKind::Relu: return relu(in[0]);
  case ir::OpKind::Sqrt: return sqrt(in[0]);
  case ir::OpKind::Rsqrt: return rsqrt(in[0]);
  case ir::OpKind::Tanh: return tanh(in[0]);
  case ir::OpKind::Abs: return abs(in[0]);
  case ir::OpKind::Sin: return sin(in[0]);
  case ir::OpKind::Cos: return cos(in[0]);
  case ir::OpKind::Pow: return pow(in[0], n.scalar);
  case ir::OpKind::Compare:
    switch (n.predicate) {
    case ir::Predicate::EQ: return eq(in[0], in[1]);
    case ir::Predicate::NE: return ne(in[0], in[1]);
    case ir::Predicate::LT: return lt(in[0], in[1]);
    case ir::Predicate::LE: return le(in[0], in[1]);
    case ir::Predicate::GT: return gt(in[0], in[1]);
    case ir::Predicate::GE: return ge(in[0], in[1]);
    }
    break;
  case ir::OpKind::Select: return where(in[0], in[1], in[2]);
  case ir::OpKind::Convert: return in[0].to(trace::dtype_of(result.type));
  case ir::OpKind::Constant: return full(result.shape, n.scalar, trace::dtype_of(result.type));
  case ir::OpKind::Matmul: return in[0].dim() == 3 ? bmm(in[0], in[1]) : matmul(in[0], in[1]);
  case ir::OpKind::Transpose: return in[0].permute(n.ints);
  case ir::OpKind::Broadcast: return in[0].expand(result.shape);
  case ir::OpKind::Reshape: return in[0].reshape(result.shape);
  case ir::OpKind::ReduceSum: return sum(in[0], n.ints, n.keepdim);
  case ir::OpKind::ReduceMax: return amax(in[0], n.ints, n.keepdim);
  }
  throw Error(std::string("kiln::compile: graph-break segment: cannot replay op ") + ir::toString(n.kind));
}

/// Gives a lazily recorded tensor its computed value. This is not an
/// in-place update of user data (the tensor had no value yet, or it is a view
/// of a real tensor and gets the values that tensor holds), so the version
/// of its storage stays: autograd's saved tensors that share it stay valid.
void assign_value(Tensor &holder, const Tensor &value) {
  auto &version = holder.impl()->storage->version;
  const uint64_t before = version.load();
  holder.copy_(value);
  version.store(before);
}

/// The first element type in `graph` that the kiln dialect does not have
/// (int32), or nullptr.
const char *uncompilable_type(const ir::Graph &graph) {
  for (const ir::Value &v : graph.values)
    if (v.type == ir::ElementType::I32) return ir::toString(v.type);
  return nullptr;
}

/// For each output, which of `leaves` its autograd graph reaches (a walk of
/// the grad_fn edges down to the leaves' AccumulateGrad nodes).
std::vector<std::vector<bool>> gradient_reach(const std::vector<Tensor> &outputs, const std::vector<Tensor> &leaves) {
  std::vector<const autograd::Node *> accumulators;
  for (const Tensor &leaf : leaves) accumulators.push_back(autograd::grad_accumulator(leaf).get());
  std::vector<std::vector<bool>> reach;
  for (const Tensor &out : outputs) {
    std::vector<bool> row(leaves.size(), false);
    std::vector<const autograd::Node *> stack;
    std::set<const autograd::Node *> seen;
    if (auto edge = autograd::gradient_edge(out); edge.valid()) stack.push_back(edge.fn.get());
    while (!stack.empty()) {
      const autograd::Node *n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (size_t i = 0; i < accumulators.size(); ++i)
        if (accumulators[i] == n) row[i] = true;
      for (const autograd::Edge &e : n->next_edges)
        if (e.valid()) stack.push_back(e.fn.get());
    }
    reach.push_back(std::move(row));
  }
  return reach;
}

/// A string that identifies a segment graph exactly (its guard).
std::string graph_signature(const ir::Graph &g) {
  std::ostringstream os;
  os << std::hexfloat;
  for (const auto &v : g.values) {
    os << static_cast<int>(v.type) << "[";
    for (int64_t d : v.shape) os << d << ",";
    os << "]";
  }
  os << "|";
  for (const auto &n : g.nodes) {
    os << static_cast<int>(n.kind) << "(";
    for (int o : n.operands) os << o << ",";
    os << ")" << n.result << "{";
    for (int64_t i : n.ints) os << i << ",";
    os << "}" << n.keepdim << n.scalar << static_cast<int>(n.predicate) << ";";
  }
  os << "|";
  for (int i : g.inputs) os << i << ",";
  os << "|";
  for (int o : g.outputs) os << o << ",";
  return os.str();
}

}  // namespace

/// One compiled segment of a module with graph breaks.
struct CompiledModule::Segment {
  std::shared_ptr<Artifact> artifact;  ///< graph (forward/backward) and grad_inputs
  std::vector<int> grad_outputs;       ///< forward outputs that carry a gradient (have a tangent)
  /// reach[k][i]: a gradient flows from grad_outputs[k] to grad input i
  /// (CompiledBackward::reach).
  std::vector<std::vector<bool>> reach;
  int num_ops = 0;
};

struct CompiledModule::Guard {
  GuardKey key;
};

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

std::shared_ptr<CompiledModule::Artifact> CompiledModule::compile_for(const Tensor &input, const GuardKey &guard,
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
    if (compile_dynamic(*artifact, *previous, dim, &why)) {
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
  compile_static(*module_, *artifact, options_, stats_);
  return artifact;
}

bool CompiledModule::compile_dynamic(Artifact &artifact, const Artifact &previous, int dim, std::string *why) {
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
  if (!codegen::compileGraphDynamic(artifact.traced, previous.traced, codegen_options(*module_, options_, stats_),
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

Tensor CompiledModule::forward_segments(const Tensor &input) {
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
  Tensor output;
  {
    // Lazy recording builds no autograd graph (any_requires_grad is false
    // under it) and keeps the user's grad mode, so in-place checks and
    // NoGradGuard regions inside forward behave as in eager; each flushed
    // segment gives its outputs the compiled backward as grad_fn.
    trace::TracingScope scope(&tracer);
    output = module_->forward(input);
  }
  flush_segment(tracer, grad_enabled, nullptr);  // `output` is live: it gets its value here
  stats_.arena_bytes = stats_.forward_arena_bytes + stats_.backward_arena_bytes;
  last_breaks_ = std::move(breaks);
  return output;
}

/// One flushed segment of this call: the recorded graph, the tensors it reads
/// and the tensors that get its values.
struct CompiledModule::SegmentCall {
  ir::Graph graph;
  std::vector<int> detached;     ///< values recorded as detach() (Tracer::detached)
  std::vector<int> no_grad;      ///< values recorded under the user's NoGradGuard (Tracer::no_grad)
  std::vector<Tensor> inputs;    ///< per graph input, the tensor bound to it
  std::vector<Tensor> holders;   ///< per graph output, the tensor that gets its value
  std::string key;               ///< the segment's guard: graph, detaches, gradient flags, checkpoint
  bool grad_enabled = false;     ///< the user's grad mode
  bool checkpointed = false;     ///< inside autograd::checkpoint: saves nothing, recomputes in backward
  int site = 0;                  ///< position among this call's flushes
};

/// The segments compiled at one position of the call (the k-th flush), to
/// bound recompiles there and say why each happened.
struct CompiledModule::SegmentSite {
  int compiled = 0;        ///< segment graphs compiled at this position
  ir::Graph last;          ///< the graph seen here last
  std::string last_key;
};

namespace {

/// Replays `graph` with eager ops on `values` (its inputs already set);
/// detached values run as detach(), no_grad ones under NoGradGuard.
void replay_nodes(const ir::Graph &graph, const std::vector<int> &detached, const std::vector<int> &no_grad,
                  std::vector<Tensor> &values) {
  auto contains = [](const std::vector<int> &ids, int id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); };
  for (const ir::Node &n : graph.nodes) {
    std::vector<Tensor> operands;
    for (int o : n.operands) operands.push_back(values[o]);
    if (contains(detached, n.result)) {
      values[n.result] = operands[0].detach();
    } else if (contains(no_grad, n.result)) {
      NoGradGuard guard;
      values[n.result] = run_node(n, operands, graph.values[n.result]);
    } else {
      values[n.result] = run_node(n, operands, graph.values[n.result]);
    }
  }
}

/// What differs between two segment graphs recorded at the same position, in
/// words ("the constant of op 3 (kiln.mul operand) changed 0.5 -> 0.7",
/// "input 0 shape [4, 6] -> [5, 6]"); the first few differences.
std::string segment_change(const ir::Graph &old, const ir::Graph &now) {
  std::vector<std::string> changes;
  const size_t shared_inputs = std::min(old.inputs.size(), now.inputs.size());
  for (size_t i = 0; i < shared_inputs; ++i) {
    const ir::Value &a = old.values[old.inputs[i]], &b = now.values[now.inputs[i]];
    if (a.shape != b.shape) changes.push_back("input " + std::to_string(i) + " shape " + shape_str(a.shape) + " -> " +
                                              shape_str(b.shape));
    if (a.type != b.type) changes.push_back("input " + std::to_string(i) + " dtype " + ir::toString(a.type) +
                                            " -> " + ir::toString(b.type));
  }
  if (old.inputs.size() != now.inputs.size())
    changes.push_back(std::to_string(now.inputs.size()) + " inputs (was " + std::to_string(old.inputs.size()) + ")");
  if (old.nodes.size() != now.nodes.size())
    changes.push_back(std::to_string(now.nodes.size()) + " ops (was " + std::to_string(old.nodes.size()) + ")");
  const size_t shared_nodes = std::min(old.nodes.size(), now.nodes.size());
  for (size_t i = 0; i < shared_nodes && changes.size() < 4; ++i) {
    const ir::Node &a = old.nodes[i], &b = now.nodes[i];
    const std::string op = "op " + std::to_string(i) + " (" + ir::toString(b.kind) + ")";
    if (a.kind != b.kind) {
      changes.push_back("op " + std::to_string(i) + " is " + ir::toString(b.kind) + " (was " + ir::toString(a.kind) + ")");
      break;  // the rest is shifted
    }
    if (a.scalar != b.scalar) {
      std::ostringstream os;
      os << "the constant of " << op << " changed " << a.scalar << " -> " << b.scalar
         << " (a host value, e.g. from item(), baked into the graph; pass it as a tensor instead)";
      changes.push_back(os.str());
    }
    if (a.ints != b.ints || a.keepdim != b.keepdim || a.predicate != b.predicate)
      changes.push_back("the attributes of " + op + " changed");
    if (old.values[a.result].shape != now.values[b.result].shape)
      changes.push_back("the result shape of " + op + " " + shape_str(old.values[a.result].shape) + " -> " +
                        shape_str(now.values[b.result].shape));
  }
  if (changes.empty()) return "which inputs require grad, the detached values or the outputs changed";
  std::string out;
  for (size_t i = 0; i < changes.size(); ++i) out += (i ? "; " : "") + changes[i];
  return out;
}

}  // namespace

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
  auto segment = compile_segment(call);
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
  KILN_CHECK(error.empty(), "kiln::compile: compiled segment failed: ", error);
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

std::shared_ptr<CompiledModule::Segment> CompiledModule::compile_segment(const SegmentCall &call) {
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
  codegen::CompileOptions copts = codegen_options(*module_, options_, stats_);
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

Tensor CompiledModule::forward(const Tensor &input) {
  KILN_CHECK(input.defined(), "kiln::compile: ", name(), " called with an undefined input");
  KILN_CHECK(input.device().is_cpu(), "kiln::compile: input is on ", input.device().str(),
             "; the compiled CPU backend expects cpu tensors");
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
    artifact = compile_for(input, guard, grad_enabled);
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
  const GuardKey guard =
      GuardKey::of(input, is_training(), autograd::GradMode::is_enabled(), *module_, options_.autocast,
                   options_.guard_scalars);
  auto it = cache_.find(guard.str());
  if (it == cache_.end()) return std::string();
  const codegen::CompiledGraph &g = it->second->graph;
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
  os << "  compile: " << g.compile_seconds << " s (frontend " << g.frontend_seconds << ", MLIR lowering "
     << g.mlir_lowering_seconds << ", LLVM " << g.llvm_seconds << ")" << (g.kernel_cache_hit ? ", kernel cache hit" : "")
     << "\n";
  os << "  saved for backward: " << g.num_saved << " values, " << g.saved_bytes
     << " bytes; random inputs (dropout masks): " << it->second->random_draws.size() << "\n";
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
