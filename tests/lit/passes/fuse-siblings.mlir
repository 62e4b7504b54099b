// kiln-fuse rule: sibling (horizontal) fusion (see passes/DESIGN.md). Groups
// that read a common input and share an iteration space merge into one
// multi-output fusion when no path links them.
// RUN: kiln-opt %s -kiln-fuse -split-input-file | FileCheck %s
// RUN: kiln-opt %s -kiln-fuse="siblings=false" -split-input-file | FileCheck %s --check-prefix=NOSIB

// Two independent consumers of %a: one fusion, two results.
// CHECK-LABEL: func.func @share_input
// CHECK: %[[F:.*]]:2 = kiln.fusion "fusion_0"(%{{.*}}) : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: kiln.exp
// CHECK: kiln.neg
// CHECK-NOT: kiln.fusion
// CHECK: return %[[F]]#0, %[[F]]#1
// NOSIB-LABEL: func.func @share_input
// NOSIB: kiln.fusion "fusion_0"
// NOSIB: kiln.fusion "fusion_1"
func.func @share_input(%a: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = kiln.exp %a : tensor<4x8xf32>
  %1 = kiln.neg %a : tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Two reductions of the same input over the same dims: one fusion.
// CHECK-LABEL: func.func @sibling_reductions
// CHECK: %[[F:.*]]:2 = kiln.fusion "fusion_0"
// CHECK: kiln.reduce_sum
// CHECK: kiln.reduce_max
// CHECK: kiln.yield
// CHECK-NOT: kiln.fusion
// CHECK: return %[[F]]#0, %[[F]]#1
func.func @sibling_reductions(%a: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kiln.reduce_sum %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %1 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Reductions over different dims are different loop nests: not merged.
// CHECK-LABEL: func.func @different_dims
// CHECK: kiln.fusion "fusion_0"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.reduce_sum %{{.*}} [0]
// CHECK-NEXT: kiln.yield
// CHECK: kiln.fusion "fusion_1"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.reduce_sum %{{.*}} [1]
// CHECK-NEXT: kiln.yield
func.func @different_dims(%a: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kiln.reduce_sum %a [0] : tensor<4x4xf32> -> tensor<4xf32>
  %1 = kiln.reduce_sum %a [1] : tensor<4x4xf32> -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Both groups read %a, but the second depends on the first through a
// matmul: merging them would be a cycle.
// CHECK-LABEL: func.func @dependent_siblings
// CHECK: kiln.fusion "fusion_0"
// CHECK: kiln.exp
// CHECK: kiln.matmul
// CHECK: kiln.fusion "fusion_1"
// CHECK: kiln.sub
func.func @dependent_siblings(%a: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = kiln.exp %a : tensor<4x4xf32>
  %m = kiln.matmul %0, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %1 = kiln.sub %a, %m : tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}
