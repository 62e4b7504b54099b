// compile/artifact.h - the pieces of kiln::compile shared by its files
// (private to frontend/src/compile): the artifact structs of CompiledModule
// and the helpers that trace a module and hand its graph to codegen.
//
//   compile.cpp    guard -> artifact (cache, dynamic shapes) -> run forward
//   segments.cpp   graph breaks: lazy segments, compiled or run eagerly
//   replay.cpp     eager replay of a recorded graph (segments)
//   artifact.cpp   tracing a module, codegen options, compile statistics
//   explain.cpp    CompiledModule::describe and kiln::explain
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "compile/guard_key.h"
#include "compile/tracer.h"
#include "kiln/autograd.h"
#include "kiln/codegen/Compiler.h"
#include "kiln/compile.h"
#include "kiln/ir/DynamicShapes.h"
#include "nn/module_registry.h"

namespace kiln {

/// What a compiled function's trace read besides its arguments, as found
/// (compile(fn)): the outermost live modules owning those tensors (with
/// their parameters' and buffers' identities, shapes, dtypes, requires_grad
/// and training mode) and each captured tensor's shape, dtype, device and
/// requires_grad. An artifact serves a call only while these still hold.
struct FoundState {
  struct Root {
    nn::registry::ModuleRef ref;
    std::string name;   ///< the module's name() at trace time
    std::string state;  ///< GuardKey::state_signature + requires_grad flags
    bool training;
  };
  std::vector<Root> roots;
  std::vector<TensorGuard> captured;
  static FoundState of(const std::vector<Tensor> &captured);
  /// "" while the artifact may serve a call, else what changed.
  std::string check(const std::vector<Tensor> &captured) const;
};

/// One compiled graph and how to bind it.
struct CompiledModule::Artifact {
  codegen::CompiledGraph graph;
  std::shared_ptr<Guard> guard;     ///< the guards it was compiled for
  int num_inputs = 1;               ///< tensor inputs of the call (graph inputs first)
  std::vector<int> grad_outputs;    ///< forward outputs that have a tangent (require grad)
  /// reach[k][i]: a gradient flows from grad_outputs[k] to grad input i
  /// (CompiledBackward::reach); empty with one grad output.
  std::vector<std::vector<bool>> reach;
  std::shared_ptr<FoundState> found;  ///< compile(fn) only: the modules and tensors found
  std::vector<Tensor> captured;     ///< bound by reference each call (parameters)
  std::vector<trace::RandomDraw> random_draws;  ///< redrawn each call (dropout masks)
  std::vector<Shape> random_shapes; ///< the shape of each draw
  std::vector<int> grad_inputs;     ///< primal positions that receive gradients
  std::vector<DType> output_types;  ///< forward outputs
  /// Captured tensors updated in place by the module (buffer mutations,
  /// trace::mutate), as indices into `captured`: forward output
  /// (number of call outputs + k) holds the new value of captured[mutated[k]],
  /// written back after each call.
  std::vector<int> mutated;
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

}  // namespace kiln

namespace kiln::compile_detail {

using autograd::TensorList;

/// The runtime view of `t` (shares its storage).
runtime::TensorView to_view(const Tensor &t);
/// A tensor over the storage of `v`.
Tensor from_view(const runtime::TensorView &v);
/// KILN_LOG contains `what`.
bool log_enabled(const char *what);
double seconds_since(std::chrono::steady_clock::time_point start);

/// The defined gradients among `grads`, and in `positions` the positions of
/// those (a tensor that no gradient reaches keeps an undefined .grad, as in
/// eager: a zero gradient would let optimizers decay and move it).
std::vector<Tensor> defined_gradients(const std::vector<Tensor> &grads, std::vector<int> &positions);

/// Traces forward + backward of `call` (its body on traced copies of its
/// inputs; one tangent per output that requires grad): the artifact's
/// graph, captured tensors, random draws and gradient positions (not
/// compiled yet). `name` is for errors (an undefined output).
std::shared_ptr<CompiledModule::Artifact> trace_call(const detail::CallSpec &call, bool with_backward,
                                                     const std::string &name);

/// codegen's options for one compile of `module` on `device` (remat,
/// budget, autocast, custom passes, the IR dump folder <dir>/<Module>-<n>).
codegen::CompileOptions codegen_options(const nn::Module &module, const CompileOptions &options,
                                        const CompileStats &stats, Device device);

/// The device a compiled graph of `module` runs on: the inputs'. Throws
/// kiln::Error when an input is undefined (naming it), when an input, a
/// parameter or a buffer is on another device (naming both) or when no
/// compile target serves it (codegen::register_target).
Device compile_device(const detail::CallSpec &call, const nn::Module &module);

/// Copies the artifact's compile time, kernel count and memory plan into
/// `stats`.
void record_compile(CompiledModule::Artifact &artifact, double seconds, CompileStats &stats);

/// Writes the new values of the artifact's mutated captured tensors (forward
/// outputs 1..) into them; a compiled backward that reads one as a primal
/// (`backward_primals`, may be null) keeps a copy of its old value.
void write_back_mutations(const CompiledModule::Artifact &artifact, const std::vector<runtime::TensorView> &results,
                          std::vector<runtime::TensorView> *backward_primals);

/// Compiles a traced artifact with static shapes.
void compile_artifact_static(nn::Module &module, CompiledModule::Artifact &artifact, const CompileOptions &options,
                    CompileStats &stats);

/// The first element type in `graph` that the kiln dialect does not have
/// (int32), or nullptr.
const char *uncompilable_type(const ir::Graph &graph);

}  // namespace kiln::compile_detail
