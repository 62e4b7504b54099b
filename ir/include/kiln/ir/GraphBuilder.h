// kiln/ir/GraphBuilder.h - turns a traced kiln::ir::Graph into a `kiln`
// dialect module.
#pragma once

#include <string>

#include "kiln/ir/Graph.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace kiln::ir {

/// Builds a module holding one `func.func @joint` from `graph`.
///
/// - Arguments are Graph::inputs in order, each with the arg attribute
///   `kiln.role = "tangent"` (InputRole::Tangent) or `"primal"`.
/// - Every Node becomes one kiln op (in order) whose result type is the
///   node's Value (static shape, element type f32/f16/bf16/i64/i1). A
///   ReduceSum/ReduceMax with keepdim becomes the reduce op (which drops the
///   dims) followed by a kiln.reshape to the keepdim shape; Constant becomes a
///   splat kiln.constant.
/// - The function returns Graph::outputs and carries the i64 attribute
///   `kiln.num_forward_outputs`.
///
/// Loads the kiln dialects into `context` (loadKilnDialects). Never crashes
/// on a bad graph: an unknown or undefined value index, a wrong operand count,
/// bad attributes or a type/shape mismatch (found by the MLIR verifier)
/// return nullptr and, if `error` is non-null, a message naming the node and
/// the problem (the verifier's diagnostic text for shape errors).
mlir::OwningOpRef<mlir::ModuleOp> buildModule(mlir::MLIRContext &context, const Graph &graph, std::string *error);

} // namespace kiln::ir
