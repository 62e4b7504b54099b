// kiln-fuse with the ops of issue 13: kiln.argmax groups like the other
// reductions (its prologue fuses in); kiln.cumsum is always a fusion alone.
// RUN: kiln-opt %s -kiln-fuse="rows=false" -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @argmax_with_prologue
// CHECK: kiln.fusion "fusion_0"
// CHECK: kiln.maximum
// CHECK-NEXT: kiln.argmax
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.fusion
func.func @argmax_with_prologue(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4xi64> {
  %0 = kiln.maximum %a, %b : tensor<4x8xf32>
  %1 = kiln.argmax %0 [1] : tensor<4x8xf32> -> tensor<4xi64>
  return %1 : tensor<4xi64>
}

// -----

// The add before and the exp after the scan each get their own fusion.
// CHECK-LABEL: func.func @cumsum_alone
// CHECK: kiln.fusion "fusion_0"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.yield
// CHECK: kiln.fusion "fusion_1"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.cumsum
// CHECK-NEXT: kiln.yield
// CHECK: kiln.fusion "fusion_2"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.yield
func.func @cumsum_alone(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.add %a, %a : tensor<4x8xf32>
  %1 = kiln.cumsum %0 [1] : tensor<4x8xf32>
  %2 = kiln.exp %1 : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
