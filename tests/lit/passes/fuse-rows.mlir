// kiln-fuse rule: row fusion (see passes/DESIGN.md). A kiln.reshape or
// kiln.broadcast between a row reduction's group and its consumers joins
// them into one kiln.fusion when the union is a row space (reductions over
// the trailing dims, every value the full shape or a row shape); the
// layout ops move into the body.
// RUN: kiln-opt %s -kiln-fuse -split-input-file | FileCheck %s
// RUN: kiln-opt %s -kiln-fuse="rows=false" -split-input-file | FileCheck %s --check-prefix=NOROWS

// Softmax: max, reshape + broadcast (a chain of layout ops), sub, exp, sum,
// reshape + broadcast, div: one fusion, one result. Without row fusion: 3.
// CHECK-LABEL: func.func @softmax
// CHECK: kiln.fusion "fusion_0"(%{{.*}}) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.reduce_max
// CHECK-NEXT: kiln.reshape
// CHECK-NEXT: kiln.broadcast
// CHECK-NEXT: kiln.sub
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.reduce_sum
// CHECK-NEXT: kiln.reshape
// CHECK-NEXT: kiln.broadcast
// CHECK-NEXT: kiln.div
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.fusion
// NOROWS-LABEL: func.func @softmax
// NOROWS-COUNT-3: kiln.fusion "fusion_
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

// -----

// Layer norm over the last dim of [2, 3, 8] (rows = 2 leading dims), with
// the row statistics returned too (saved for backward): one fusion whose
// results are the output and the [2, 3, 1] mean; the column broadcast of the
// weight reads a fusion input and stays outside (a view).
// CHECK-LABEL: func.func @layer_norm
// CHECK: %[[W:.*]] = kiln.broadcast %{{.*}} : tensor<8xf32> -> tensor<2x3x8xf32>
// CHECK: %[[F:.*]]:2 = kiln.fusion "fusion_0"(%{{.*}}, %[[W]]) : (tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x1xf32>, tensor<2x3x8xf32>)
// CHECK: kiln.reduce_sum %{{.*}} [2] : tensor<2x3x8xf32> -> tensor<2x3xf32>
// CHECK: kiln.reshape %{{.*}} : tensor<2x3xf32> -> tensor<2x3x1xf32>
// CHECK: kiln.broadcast %{{.*}} : tensor<2x3x1xf32> -> tensor<2x3x8xf32>
// CHECK: kiln.reduce_sum %{{.*}} [2] : tensor<2x3x8xf32> -> tensor<2x3xf32>
// CHECK: kiln.rsqrt
// CHECK: kiln.broadcast
// CHECK: kiln.mul
// CHECK: kiln.mul
// CHECK: kiln.yield
// CHECK-NOT: kiln.fusion
// CHECK: return %[[F]]#1, %[[F]]#0
func.func @layer_norm(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>) {
  %inv_n = kiln.constant 0.125 : tensor<2x3x1xf32>
  %eps = kiln.constant 1.0e-05 : tensor<2x3x1xf32>
  %s = kiln.reduce_sum %x [2] : tensor<2x3x8xf32> -> tensor<2x3xf32>
  %sr = kiln.reshape %s : tensor<2x3xf32> -> tensor<2x3x1xf32>
  %mean = kiln.mul %sr, %inv_n : tensor<2x3x1xf32>
  %mb = kiln.broadcast %mean : tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %d = kiln.sub %x, %mb : tensor<2x3x8xf32>
  %sq = kiln.mul %d, %d : tensor<2x3x8xf32>
  %v = kiln.reduce_sum %sq [2] : tensor<2x3x8xf32> -> tensor<2x3xf32>
  %vr = kiln.reshape %v : tensor<2x3xf32> -> tensor<2x3x1xf32>
  %var = kiln.mul %vr, %inv_n : tensor<2x3x1xf32>
  %ve = kiln.add %var, %eps : tensor<2x3x1xf32>
  %r = kiln.rsqrt %ve : tensor<2x3x1xf32>
  %rb = kiln.broadcast %r : tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %n = kiln.mul %d, %rb : tensor<2x3x8xf32>
  %wb = kiln.broadcast %w : tensor<8xf32> -> tensor<2x3x8xf32>
  %y = kiln.mul %n, %wb : tensor<2x3x8xf32>
  return %y, %mean : tensor<2x3x8xf32>, tensor<2x3x1xf32>
}

// -----

// A broadcast whose value is also returned would be written out at full
// size: it stays outside, and so the max stays a kernel of its own.
// CHECK-LABEL: func.func @broadcast_used_outside
// CHECK: kiln.fusion "fusion_0"
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.reduce_max
// CHECK-NEXT: kiln.yield
// CHECK: %[[B:.*]] = kiln.broadcast
// CHECK: kiln.fusion "fusion_1"
// CHECK-NOT: kiln.broadcast
// CHECK: return %{{.*}}, %[[B]]
func.func @broadcast_used_outside(%a: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %m = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %mr = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %mb = kiln.broadcast %mr : tensor<4x1xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %mb : tensor<4x8xf32>
  return %0, %mb : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Rows are leading dims: a reduction over dim 0 (a column sum, as in a bias
// gradient) is not a row space, so the broadcast stays a view between two
// fusions.
// CHECK-LABEL: func.func @column_reduction
// CHECK: kiln.fusion "fusion_0"
// CHECK: kiln.reduce_sum %{{.*}} [0]
// CHECK: kiln.broadcast
// CHECK: kiln.fusion "fusion_1"
// CHECK-NOT: kiln.broadcast
func.func @column_reduction(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = kiln.reduce_sum %a [0] : tensor<4x8xf32> -> tensor<8xf32>
  %sb = kiln.broadcast %s : tensor<8xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %sb : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
