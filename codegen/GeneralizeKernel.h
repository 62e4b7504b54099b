// codegen/GeneralizeKernel.h - which dims of a kernel are dynamic
// (private to codegen/): row-split kernels and automatic dynamic shapes
// (kiln/ir/DynamicShapes.h). Target-neutral: a target's emitGenericKernel
// reads the KernelGeneralization.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mlir/Support/LogicalResult.h"

#include "kiln/ir/KilnOps.h"

namespace kiln::codegen {

/// True if dim 0 of `fusion` is one parallel loop shared by every operand,
/// result and body value: all are ranked with the same dim-0 size N >= 2
/// (an operand broadcast along dim 0 is a stride-0 view of that size) and
/// no reduction reduces dim 0. Elementwise kernels and row fusions over
/// leading rows are; a column sum is not. Slicing dim 0 then gives each
/// thread an independent kernel call computing the same values (per-row
/// reductions keep their order: the result does not depend on the thread
/// count).
bool isRowSplittable(kiln::ir::FusionOp fusion);

/// How one kernel is made shape-generic (automatic dynamic shapes,
/// kiln/ir/DynamicShapes.h). Built by comparing a kiln.fusion with the same
/// fusion of the graph traced at another size: every dim that differs is
/// dynamic (`?` in the kernel's memref types) and belongs to a *size class*
/// (the pair of its two sizes: dims of one class are equal at every size);
/// every float splat constant whose value differs (e.g. a mean's 1/N) is a
/// runtime scalar argument.
struct KernelGeneralization {
  /// Per fusion operand and per result: per dim, -1 (static) or a size class.
  std::vector<std::vector<int>> inputs, results;
  /// Per fusion operand: its strides where they agree at both sizes, else
  /// ShapedType::kDynamic.
  std::vector<std::vector<int64_t>> inputStrides;
  /// The same for each body op's result, in body order (yield excluded).
  std::vector<std::vector<int>> body;
  /// Per size class: (argument index over operands then results, dim) the
  /// kernel reads the size from (memref.dim).
  std::vector<std::pair<int, int>> sources;
  /// Body positions of the constants passed as scalar arguments, in order;
  /// each is a rank-0 memref of the constant's element type placed after the
  /// fusion operands and before the results.
  std::vector<int> scalarConstants;
};

/// The generalization of a row-split kernel (isRowSplittable): dim 0 of
/// every operand, result and body value is size class 0, read from the first
/// argument; nothing else is dynamic.
KernelGeneralization rowSplitGeneralization(kiln::ir::FusionOp fusion);

/// Compares `fusion` with `reference` (the same kernel of the graph at
/// another size). Fails with `*why` if they differ in anything but sizes and
/// float constants, or a dynamic size inside the body is not the size of any
/// kernel argument.
mlir::FailureOr<KernelGeneralization> generalizeKernel(kiln::ir::FusionOp fusion, kiln::ir::FusionOp reference,
                                                       std::string *why);

/// The values of `fusion`'s scalar-argument constants (generic.scalarConstants).
std::vector<double> scalarArguments(kiln::ir::FusionOp fusion, const KernelGeneralization &generic);

} // namespace kiln::codegen
