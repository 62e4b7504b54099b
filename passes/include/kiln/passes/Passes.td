//===- Passes.td - Kiln compiler passes --------------------*- tablegen -*-===//
//
// Every pass: kebab-case name prefixed `kiln-`, one .cpp in passes/lib whose
// DEBUG_TYPE equals the name, a row in passes/README.md's pass table, its
// rules in passes/DESIGN.md and a lit test in tests/lit/passes.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_TD
#define KILN_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnRematPass : Pass<"kiln-remat", "mlir::ModuleOp"> {
  let summary = "Choose which forward values of func @joint to save for backward and which to recompute";
  let description = [{
    Checkpoint rematerialization under a memory budget, on the joint
    forward+backward function before kiln-partition (AOTAutograd's
    min_cut_rematerialization_partition with activation_memory_budget,
    torch/_functorch/partitioners.py).

    Every forward value that backward reads is either saved (a result of
    @forward) or recomputed in @backward from saved values and primals. The
    choice is a minimum s-t cut: each forward op is split into in/out nodes
    joined by an edge whose capacity is its result's bytes; forward values
    backward reads are tied to the sink; ops that may not be recomputed are
    tied to the source; primal arguments and forward outputs are free to
    keep. With `memory-budget` = 1 only cheap ops (pointwise, views, casts,
    constants, reductions that shrink their operand at most 4x) may be
    recomputed; with 0 every kiln op may be, so only primals are kept; in
    between the estimated peak activation memory (saved bytes + the larger
    of the forward and backward arenas, estimated by partitioning and
    fusing a copy of the module and replaying the runtime's memory plan)
    stays <= budget * the budget-1 cut's, at the least estimated step time,
    among cuts proposed by a 0/1 knapsack over the expensive ops (matmuls,
    large reductions) allowed to be recomputed; when no cut fits, the one
    with the smallest peak.

    The decision is written on @joint: `kiln.memory_budget` (f64) on the
    function and a `kiln.saved` unit attribute on each op whose result is
    saved; kiln-partition follows it. Rules in passes/DESIGN.md.
  }];
  let options = [
    Option<"memoryBudget", "memory-budget", "double", /*default=*/"1.0",
           "In [0, 1]: 1 = the min-cut over cheap ops, 0 = recompute everything; in between, the fraction of budget 1's peak activation memory to stay within">,
    Option<"bytesPerSecond", "bytes-per-second", "double", /*default=*/"26e9",
           "The step-time model's kernel memory traffic (the compile target's codegen::CostModel; default: the CPU target's)">,
    Option<"flopsPerSecond", "flops-per-second", "double", /*default=*/"130e9",
           "The step-time model's GEMM throughput; a kernel byte costs flops-per-second / bytes-per-second FLOPs, rounded to a whole number (default 5)">,
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::kiln::ir::KilnDialect"];
}

def KilnAutocastPass : Pass<"kiln-autocast", "mlir::ModuleOp"> {
  let summary = "Insert kiln.convert ops so GEMMs run in bf16/f16 (autocast)";
  let description = [{
    Mixed precision as PyTorch's autocast, on the traced graph (run on
    func @joint before kiln-partition, so backward GEMMs are cast too). For
    every op, in program order, the policy of `kiln::ir::autocastPolicy`
    (ir/AutocastPolicy.h, keyed by the op name without `kiln.`) decides the
    element type it computes in:

    - lower precision (kiln.matmul): float operands are converted to `dtype`,
      the result is `dtype`;
    - float32 (reduce_sum, exp, log, pow, sqrt, rsqrt): float operands are
      converted to f32;
    - promote, and ops without a policy: float operands of different types
      are converted to the widest (f16 + bf16 -> f32); splat constants are
      "weak" (as Python scalars in PyTorch): they take the other operands'
      type instead of promoting them.

    A result's element type follows its operands; func.return converts back
    to the function's result types (gradients and outputs keep their types;
    arguments, the f32 master weights, are never retyped). A convert of a
    layout op's result is placed before the layout op, so one cast of a
    weight serves its transposed uses. Then redundant casts go: a convert to
    the same type, and a convert of an exact widening (bf16 -> f32 -> bf16
    and f16 -> f32 -> f16 become nothing, bf16 -> f32 -> f16 becomes bf16 ->
    f16); f32 -> bf16 -> f32 rounds and stays. The module gets a `kiln.autocast` attribute
    (dtype, casts inserted and removed, low-precision ops by name) for reports.
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", /*default=*/"\"bf16\"",
           "Lower precision type for GEMMs: bf16 or f16">,
  ];
  let dependentDialects = ["::kiln::ir::KilnDialect"];
}

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

    Recomputed ops are cloned into @backward just before their first user;
    a recomputed value last cloned more than `recompute-distance` ops
    earlier (and of at least `recompute-min-bytes`) is cloned again for a
    later use instead of being held in between (per-use recomputation).
  }];
  let options = [
    Option<"recomputeDistance", "recompute-distance", "int64_t", /*default=*/"64",
           "Re-clone a recomputed value for a use more than this many cloned ops after its last clone (negative: never)">,
    Option<"recomputeMinBytes", "recompute-min-bytes", "int64_t", /*default=*/"262144",
           "Only values of at least this many bytes are re-cloned">
  ];
  let dependentDialects = ["::mlir::func::FuncDialect",
                           "::kiln::ir::KilnDialect"];
}

def KilnFusePass : Pass<"kiln-fuse", "mlir::ModuleOp"> {
  let summary = "Group elementwise ops and reductions into kiln.fusion regions";
  let description = [{
    Runs on every func.func of the module (a module pass so that kernel names
    `fusion_0, fusion_1, ...` are unique and numbered in order of appearance
    across the module). Rules, in passes/DESIGN.md:

    - vertical: ops are walked in reverse program order; each unfused
      elementwise op or reduction seeds a group and every earlier compute op
      with a user in the group is offered to it; a producer that also has
      users outside the group is yielded as an extra result (multi-output);
      a reduction may join as the producer of an epilogue;
    - horizontal: groups that read a common input (siblings) or are linked
      by an edge the walk could not take are merged;
    - every merge keeps one iteration space (same shape, or a reduction of
      it and its reduced shape), creates no cycle between groups and stays
      within `max-ops` ops;
    - rows: a kiln.reshape or kiln.broadcast between groups joins them into
      one row fusion (a reduction over trailing dims, its per-row results
      broadcast back over the row: layer_norm, softmax) when the union is a
      kiln::ir::RowSpace.

    Splat constants are cloned into each fusion that uses them; a constant
    still used outside fusions is wrapped in its own fusion. Afterwards a
    function holds only kiln.fusion, kiln.matmul, layout ops and func.return,
    in a topological order that keeps program order where it can.
  }];
  let options = [
    Option<"maxOps", "max-ops", "unsigned", /*default=*/"64",
           "Most elementwise ops and reductions in one fusion">,
    Option<"multiOutput", "multi-output", "bool", /*default=*/"true",
           "Let a producer with users outside the group join it (yielded as an extra result)">,
    Option<"siblings", "siblings", "bool", /*default=*/"true",
           "Merge groups that share an input or an edge (horizontal fusion)">,
    Option<"epilogues", "epilogues", "bool", /*default=*/"true",
           "Fuse elementwise consumers of a reduction's result into its group">,
    Option<"rows", "rows", "bool", /*default=*/"true",
           "Fuse across the reshape/broadcast between a row reduction and its consumers (row fusions)">,
  ];
  let dependentDialects = ["::kiln::ir::KilnDialect"];
}

#endif // KILN_PASSES_TD
