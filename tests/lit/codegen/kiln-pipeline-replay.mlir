// kiln-opt --kiln-pipeline replays kiln::compile's pipeline on a KILN_DUMP_IR
// input. Inputs/joint-exp-mul.input is the 00-input.mlir that compileGraph
// dumped for y = exp(x) * w with x's gradient (PipelineHooksTest's graph,
// memory budget 0.5); the checks are the kernels its 05-fuse.mlir held:
// forward fusion_0 (exp, mul), backward fusion_1 (two muls, exp recomputed
// from the primal under kiln-remat). PipelineHooksTest.
// ReplayOfDumpedInputMatchesCompile checks the whole text is identical.
// RUN: kiln-opt --kiln-pipeline="memory-budget=0.5" %S/Inputs/joint-exp-mul.input | FileCheck %s

// CHECK-LABEL: func.func @forward
// CHECK: kiln.fusion "fusion_0"
// CHECK: kiln.exp
// CHECK: kiln.mul
// CHECK-NOT: kiln.fusion
// CHECK-LABEL: func.func @backward
// CHECK: kiln.fusion "fusion_1"
// CHECK-NOT: kiln.fusion
