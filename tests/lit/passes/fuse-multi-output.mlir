// kiln-fuse rule: multi-output fusion (see passes/DESIGN.md). A producer
// whose users are partly outside the group joins it when no path leads from
// those outside users back into the group; its value becomes an extra
// fusion result.
// RUN: kiln-opt %s -kiln-fuse -split-input-file | FileCheck %s
// RUN: kiln-opt %s -kiln-fuse="multi-output=false siblings=false" -split-input-file | FileCheck %s --check-prefix=SINGLE

// %0 is returned and consumed: one fusion yields both values.
// CHECK-LABEL: func.func @returned_and_consumed
// CHECK: %[[F:.*]]:2 = kiln.fusion "fusion_0"
// CHECK: %[[E:.*]] = kiln.exp
// CHECK-NEXT: %[[N:.*]] = kiln.neg %[[E]]
// CHECK-NEXT: kiln.yield %[[E]], %[[N]]
// CHECK: return %[[F]]#0, %[[F]]#1
// SINGLE-LABEL: func.func @returned_and_consumed
// SINGLE: kiln.fusion "fusion_0"
// SINGLE: kiln.fusion "fusion_1"
func.func @returned_and_consumed(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kiln.exp %a : tensor<4xf32>
  %1 = kiln.neg %0 : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// ReLU backward: the masked gradient feeds a matmul (outside) and the bias
// gradient reduction: ONE fusion yields both; the matmul, which came first
// in program order, moves below the fusion that now defines its operand.
// CHECK-LABEL: func.func @relu_backward
// CHECK: %[[F:.*]]:2 = kiln.fusion "fusion_0"
// CHECK: kiln.compare
// CHECK-NEXT: %[[G:.*]] = kiln.select
// CHECK-NEXT: %[[B:.*]] = kiln.reduce_sum %[[G]] [0]
// CHECK-NEXT: kiln.yield %[[G]], %[[B]] : tensor<4x8xf32>, tensor<8xf32>
// CHECK-NOT: kiln.fusion
// CHECK: %[[M:.*]] = kiln.matmul %[[F]]#0
// CHECK: return %[[M]], %[[F]]#1
// SINGLE-LABEL: func.func @relu_backward
// SINGLE: kiln.fusion "fusion_0"
// SINGLE: kiln.fusion "fusion_1"
func.func @relu_backward(%z: tensor<4x8xf32>, %gy: tensor<4x8xf32>, %w: tensor<8x3xf32>) -> (tensor<4x3xf32>, tensor<8xf32>) {
  %zero = kiln.constant 0.0 : tensor<4x8xf32>
  %mask = kiln.compare gt, %z, %zero : tensor<4x8xf32>
  %gz = kiln.select %mask, %gy, %zero : tensor<4x8xf32>
  %gx = kiln.matmul %gz, %w : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
  %gb = kiln.reduce_sum %gz [0] : tensor<4x8xf32> -> tensor<8xf32>
  return %gx, %gb : tensor<4x3xf32>, tensor<8xf32>
}

// -----

// %0's outside user (the matmul) feeds the group of %1: fusing %0 into it
// would be a cycle, so %0 keeps its own fusion.
// CHECK-LABEL: func.func @cycle_rejected
// CHECK: %[[E:.*]] = kiln.fusion "fusion_0"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.yield
// CHECK: %[[M:.*]] = kiln.matmul %[[E]]
// CHECK: kiln.fusion "fusion_1"(%[[E]], %[[M]])
// CHECK-NOT: kiln.exp
// CHECK: kiln.add
func.func @cycle_rejected(%a: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = kiln.exp %a : tensor<4x4xf32>
  %m = kiln.matmul %0, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %1 = kiln.add %0, %m : tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}

// -----

// The final topological sort keeps each op as close to its old place as it
// can: the matmul that read exp (now a result of the fusion placed at neg,
// the group's last member) lands right after the fusion, not behind the
// independent transpose and matmul that follow.
// CHECK-LABEL: func.func @sorted_near_original_order
// CHECK: %[[F:.*]]:2 = kiln.fusion "fusion_0"
// CHECK: kiln.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[M:.*]] = kiln.matmul %[[F]]#0, %arg1
// CHECK-NEXT: kiln.transpose %arg2
// CHECK-NEXT: kiln.matmul %arg2, %arg1
func.func @sorted_near_original_order(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>, %u: tensor<4x4xf32>)
    -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %e = kiln.exp %x : tensor<4x4xf32>
  %m = kiln.matmul %e, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %n = kiln.neg %x : tensor<4x4xf32>
  %t = kiln.transpose %u [1, 0] : tensor<4x4xf32> -> tensor<4x4xf32>
  %m2 = kiln.matmul %u, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %m, %n, %t, %m2 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}
