// kiln/onnx.h - export a module's inference forward to ONNX (torch.onnx.export).
//
//   #include "kiln/onnx.h"            // library KilnOnnx (not part of kiln.h)
//   model->eval();                    // export_model does this itself, then restores
//   kiln::onnx::export_model(*model, {x}, "model.onnx",
//       kiln::onnx::ExportOptions().input_names({"pixels"}).output_names({"logits"})
//                                  .dynamic_axis("pixels", 0, "batch"));
//
// What is exported: the forward graph that kiln::compile captures (the same
// tracer, frontend/src/compile/tracer.h), traced in eval mode under
// NoGradGuard: parameters, buffers and constant tensors the forward reads
// become initializers named by their state_dict key ("0.weight",
// "blocks.1.ln1.bias"; other captured constants "_const_<k>"). Composite ops
// arrive as the primitives Kiln records (layer_norm as mean/sub/rsqrt/...,
// embedding as GatherElements of an expanded index), so the ONNX graph is
// operator-for-operator what Kiln's compiler sees.
//
// Operator set: the default ONNX domain at opset kOpsetVersion (17, the
// newest that Debian's libonnx 1.12 checks; operator semantics as in
// https://github.com/onnx/onnx/blob/v1.12.0/docs/Operators.md). Kiln op ->
// ONNX: add/sub/mul/div -> Add/Sub/Mul/Div; neg/exp/log/relu/sqrt/tanh/abs/
// sin/cos/erf/floor/ceil/round -> the operator of that name; rsqrt ->
// Reciprocal(Sqrt); trunc -> Where(x < 0, Ceil, Floor); pow -> Pow with a
// constant exponent; compare -> Equal/Not(Equal)/Less/LessOrEqual/Greater/
// GreaterOrEqual; select -> Where; convert -> Cast; constant -> Expand of a
// scalar; matmul -> MatMul; transpose/broadcast/reshape -> Transpose/Expand/
// Reshape; reduce_sum/max/min -> ReduceSum/ReduceMax/ReduceMin; argmax/argmin
// -> ArgMax/ArgMin; cumsum -> CumSum; maximum/minimum -> Max/Min; fmod ->
// Mod(fmod=1); remainder and floor_div -> Mod(fmod=0) and Div for integers,
// Floor-based formulas for floats; conv2d -> Conv; max_pool2d -> MaxPool;
// gather -> GatherElements; scatter_add -> ScatterElements(reduction="add").
// No ONNX form (kiln::Error naming the op): the backward-only ops
// (conv2d_input_grad, conv2d_weight_grad, max_pool2d_indices,
// max_pool2d_backward, max_pool2d_gather), and every op that a whole-graph
// trace cannot capture (item(), randn/uniform, a cat of integer tensors,
// a device copy: the ops that are graph breaks under kiln::compile).
//
// Naming: libonnx's own namespace is also `onnx`; where its headers and
// `using namespace kiln;` are both in scope, write `kiln::onnx::`.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln::onnx {

/// The ONNX opset (default domain "") every exported model declares.
constexpr int64_t kOpsetVersion = 17;
/// The ONNX IR version written (ONNX 1.12's IR_VERSION, 8).
constexpr int64_t kIrVersion = 8;

/// {input or output name -> {dim -> symbol}} (torch.onnx.export's dynamic_axes).
using DynamicAxes = std::map<std::string, std::map<int64_t, std::string>>;

/// Options of export_model (torch.onnx.export's arguments of the same
/// names), with chained setters as the nn options structs.
struct ExportOptions {
  /// Graph input names, one per example input. Default (empty): "input" for
  /// one input, else "input_0", "input_1", ...
  KILN_ARG(std::vector<std::string>, input_names);
  /// Graph output names, one per forward output. Default (empty): "output",
  /// or "output_0", "output_1", ... for several.
  KILN_ARG(std::vector<std::string>, output_names);
  /// Dynamic axes. Every dynamic axis names the same symbol (one symbol per
  /// export, e.g. "batch"), at least one of them on an input, whose example
  /// size must be >= 2. The dims of other values that follow it (an output's
  /// batch dim, a flattened batch*tokens) are found by tracing a second time
  /// at example size + 1 (ir::fitSymbolicGraph) and computed at run time from
  /// the input's shape (Shape, Mul, Concat). Output dims found dynamic but
  /// not named are named "<symbol>" (or "<c>*<symbol>"). Default: none (a
  /// static export).
  KILN_ARG(DynamicAxes, dynamic_axes);
  /// ModelProto.producer_name ("kiln") and doc_string ("").
  KILN_ARG(std::string, producer_name) = "kiln";
  KILN_ARG(std::string, doc_string);

public:
  /// Marks dim `dim` of the input or output `name` dynamic, as `symbol`.
  ExportOptions &dynamic_axis(const std::string &name, int64_t dim, const std::string &symbol) {
    dynamic_axes_[name][dim] = symbol;
    return *this;
  }
};

/// What export_model wrote.
struct ExportInfo {
  int64_t opset = kOpsetVersion;
  std::vector<std::string> input_names, output_names;
  int64_t num_nodes = 0;          ///< ONNX nodes in the graph
  int64_t num_initializers = 0;   ///< weights and constants
  int64_t initializer_bytes = 0;  ///< their raw data, bytes
  std::string dynamic_symbol;     ///< "" for a static export
  /// ONNX operator -> how many nodes use it (sorted by name).
  std::map<std::string, int64_t> op_counts;
};

/// Traces `model.forward(example_inputs)` in eval mode without gradients
/// (the module's training flag is restored afterwards), converts the graph
/// to an ONNX ModelProto (opset kOpsetVersion, IR version kIrVersion), runs
/// onnx::checker::check_model on it and writes it to `path` (protobuf
/// binary). Inputs: CPU tensors of dtype float32, float64, float16,
/// bfloat16, int64, int32 or bool, any shape (one graph input each, in
/// order); outputs: whatever the forward returns, in order. A
/// CompiledModule (kiln::compile's result) is exported as the module it
/// wraps.
///
/// Throws kiln::Error when: an input is undefined or not on the CPU; the
/// name lists have the wrong length or repeat a name; a dynamic axis names
/// an unknown input/output, a dim out of range, a second symbol, or a dim of
/// example size < 2; the traces at the two sizes differ (a shape the batch
/// decides in a non-monomial way, such as a captured tensor of batch size);
/// an op has no ONNX form ("onnx::export_model: op 'item' ..." naming the
/// op, see the list at the top of this file); a constant depends on the
/// dynamic dim; the ONNX checker rejects the model (its message is
/// included); or `path` cannot be written.
ExportInfo export_model(nn::Module &model, const std::vector<Tensor> &example_inputs, const std::string &path,
                        const ExportOptions &options = {});

}  // namespace kiln::onnx
