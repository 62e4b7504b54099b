// onnx/graph_to_onnx.h (internal) - a traced forward ir::Graph as an ONNX
// ModelProto (kiln/onnx.h lists the op mapping). export_model traces the
// module and calls this; tests call it on hand-built graphs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/ir/DynamicShapes.h"
#include "kiln/ir/Graph.h"
#include "kiln/tensor.h"
#include "onnx/onnx_pb.h"

namespace kiln::onnx::detail {

/// A forward graph and how to name it. graph.inputs are [user inputs
/// (num_user_inputs), captured tensors (initializers)]; graph.outputs the
/// forward outputs.
struct GraphSpec {
  const ir::Graph *graph = nullptr;
  /// When the export has a dynamic axis: the graph as a function of one
  /// symbol (graph above must be symbolic->graph); null for a static export.
  const ir::SymbolicGraph *symbolic = nullptr;
  std::string symbol;  ///< the symbol's name in dim_param ("batch")
  int num_user_inputs = 0;
  std::vector<std::string> input_names;        ///< per user input
  std::vector<std::string> initializer_names;  ///< per captured tensor
  std::vector<Tensor> initializers;            ///< per captured tensor: its value (CPU)
  std::vector<std::string> output_names;       ///< per graph output
  /// dim_param overrides for graph inputs/outputs: name -> {dim -> symbol}.
  std::map<std::string, std::map<int64_t, std::string>> dim_names;
  std::string producer_name = "kiln", doc_string;
};

/// Builds the ModelProto (opset kOpsetVersion). Throws kiln::Error naming
/// the op for a node without an ONNX form, or a constant that depends on the
/// dynamic symbol. Does not run the checker.
::onnx::ModelProto graph_to_onnx(const GraphSpec &spec);

/// onnx::checker::check_model plus strict shape inference with type checks
/// (what onnx.checker.check_model(full_check=True) runs). Throws kiln::Error
/// with the checker's message.
void check(const ::onnx::ModelProto &model);

/// ONNX TensorProto data type of a Kiln element type.
int onnx_data_type(ir::ElementType type);

}  // namespace kiln::onnx::detail
