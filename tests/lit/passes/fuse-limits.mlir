// kiln-fuse rule: the size cap `max-ops` (see passes/DESIGN.md) and
// deterministic kernel order.
// RUN: kiln-opt %s -kiln-fuse="max-ops=2" -split-input-file | FileCheck %s
// RUN: kiln-opt %s -kiln-fuse -split-input-file | FileCheck %s --check-prefix=NOCAP

// Four chained ops with at most two per fusion: two fusions, the later ops
// grouped first by the reverse walk.
// CHECK-LABEL: func.func @capped_chain
// CHECK: kiln.fusion "fusion_0"
// CHECK: kiln.exp
// CHECK-NEXT: kiln.neg
// CHECK-NEXT: kiln.yield
// CHECK: kiln.fusion "fusion_1"
// CHECK: kiln.relu
// CHECK-NEXT: kiln.log
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.fusion
// NOCAP-LABEL: func.func @capped_chain
// NOCAP: kiln.fusion "fusion_0"
// NOCAP-COUNT-4: kiln.{{exp|neg|relu|log}}
// NOCAP-NOT: kiln.fusion
func.func @capped_chain(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %a : tensor<4xf32>
  %1 = kiln.neg %0 : tensor<4xf32>
  %2 = kiln.relu %1 : tensor<4xf32>
  %3 = kiln.log %2 : tensor<4xf32>
  return %3 : tensor<4xf32>
}
