//===- Passes.td - Kiln compiler passes --------------------*- tablegen -*-===//
//
// Every pass: kebab-case name prefixed `kiln-`, one .cpp in passes/lib whose
// DEBUG_TYPE equals the name, an entry in passes/README.md and a lit test in
// tests/lit.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_TD
#define KILN_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnPartitionPass : Pass<"kiln-partition", "mlir::ModuleOp"> {
  let summary = "Split func @joint into @forward and @backward";
  let description = [{
    Takes `func.func @joint` (from the GraphBuilder) and replaces it with

    - `@forward(primals...) -> (forward outputs..., saved...)` carrying
      `kiln.num_forward_outputs` and `kiln.num_saved`;
    - `@backward(primals..., saved..., tangents...) -> (gradients...)` (all
      primals are passed, used or not, so no signature mapping is needed).

    The forward set is the backward slice of the first
    `kiln.num_forward_outputs` results. Saved values are forward results that
    backward ops use, in program order, excluding primal arguments. Layout
    ops (transpose, broadcast, reshape) and constants computed only from
    primals and constants are re-materialized (cloned) into @backward instead
    of being saved. A graph with neither tangent arguments nor gradient
    results is just renamed @forward with `kiln.num_saved = 0`.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::kiln::ir::KilnDialect"];
}

def KilnFusePass : Pass<"kiln-fuse", "mlir::ModuleOp"> {
  let summary = "Group elementwise ops and reductions into kiln.fusion regions";
  let description = [{
    Runs on every func.func of the module (a module pass so that kernel names
    `fusion_0, fusion_1, ...` are unique and numbered in order of appearance
    across the module). Rules, in passes/README.md: ops are walked in reverse
    program order; each unfused elementwise op or reduction seeds a group; a
    producer joins the group if it is elementwise, its result shape is the
    group's iteration space (the seed's result shape, or the operand shape
    for a reduction seed) and all of its users are already in the group.
    Splat constants are cloned into each fusion that uses them; a constant
    still used outside fusions is wrapped in its own fusion. Afterwards a
    function holds only kiln.fusion, kiln.matmul, layout ops and func.return.
  }];
  let dependentDialects = ["::kiln::ir::KilnDialect"];
}

#endif // KILN_PASSES_TD
