// kiln-fuse rule: reduction epilogues (see passes/DESIGN.md). Elementwise
// consumers with the reduction's result shape join the reduction's group.
// Consumers reached through a broadcast of the result do not (that would be
// a cycle through the layout op) unless row fusion joins the layout op too:
// these cases run with rows=false; fuse-rows.mlir has them with row fusion.
// RUN: kiln-opt %s -kiln-fuse="rows=false" -split-input-file | FileCheck %s
// RUN: kiln-opt %s -kiln-fuse="epilogues=false rows=false" -split-input-file | FileCheck %s --check-prefix=NOEPI

// mean(log(sum(exp(a), 1))): prologue, reduction and epilogue in one fusion.
// CHECK-LABEL: func.func @log_sum_exp_scaled
// CHECK: kiln.fusion "fusion_0"(%{{.*}}) : (tensor<4x8xf32>) -> tensor<4xf32>
// CHECK: kiln.exp
// CHECK-NEXT: kiln.reduce_sum
// CHECK-NEXT: kiln.log
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.fusion
// NOEPI-LABEL: func.func @log_sum_exp_scaled
// NOEPI: kiln.fusion "fusion_0"
// NOEPI: kiln.reduce_sum
// NOEPI: kiln.fusion "fusion_1"
// NOEPI: kiln.log
func.func @log_sum_exp_scaled(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  %c = kiln.constant 0.125 : tensor<4xf32>
  %0 = kiln.exp %a : tensor<4x8xf32>
  %1 = kiln.reduce_sum %0 [1] : tensor<4x8xf32> -> tensor<4xf32>
  %2 = kiln.log %1 : tensor<4xf32>
  %3 = kiln.mul %2, %c : tensor<4xf32>
  return %3 : tensor<4xf32>
}

// -----

// Stable log-sum-exp: the max reaches the sum's group through a broadcast,
// so it stays a kernel of its own; the epilogue add reads it as an operand.
// CHECK-LABEL: func.func @stable_logsumexp
// CHECK: %[[M:.*]] = kiln.fusion "fusion_0"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.reduce_max
// CHECK-NEXT: kiln.yield
// CHECK: kiln.broadcast
// CHECK: kiln.fusion "fusion_1"(%{{.*}}, %{{.*}}, %[[M]])
// CHECK: kiln.sub
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.reduce_sum
// CHECK-NEXT: kiln.log
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.yield
func.func @stable_logsumexp(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  %m = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %r = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %b = kiln.broadcast %r : tensor<4x1xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %b : tensor<4x8xf32>
  %1 = kiln.exp %0 : tensor<4x8xf32>
  %2 = kiln.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
  %3 = kiln.log %2 : tensor<4xf32>
  %4 = kiln.add %3, %m : tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// Softmax: 3 kernels (max; sub, exp, sum yielding exp and sum; div). The
// broadcasts of the max and the sum stay outside fusions.
// CHECK-LABEL: func.func @softmax
// CHECK: kiln.fusion "fusion_0"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.reduce_max
// CHECK-NEXT: kiln.yield
// CHECK: %[[E:.*]]:2 = kiln.fusion "fusion_1"
// CHECK: kiln.sub
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.reduce_sum
// CHECK-NEXT: kiln.yield
// CHECK: kiln.broadcast %{{.*}} : tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK: kiln.fusion "fusion_2"(%[[E]]#0, %{{.*}})
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.div
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.fusion
func.func @softmax(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %mr = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %mb = kiln.broadcast %mr : tensor<4x1xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %mb : tensor<4x8xf32>
  %1 = kiln.exp %0 : tensor<4x8xf32>
  %s = kiln.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
  %sr = kiln.reshape %s : tensor<4xf32> -> tensor<4x1xf32>
  %sb = kiln.broadcast %sr : tensor<4x1xf32> -> tensor<4x8xf32>
  %2 = kiln.div %1, %sb : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
