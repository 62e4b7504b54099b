// kiln-fuse on batch_norm's training statistics (frontend/src/nn/
// normalization.cpp, normalize_one_pass): the per-channel sums of x and of
// x * x over [N, H, W] are sibling reductions of one input, so they merge into
// one two-result fusion: one pass over the data for mean and variance.
// RUN: kiln-opt %s -kiln-fuse | FileCheck %s

// CHECK-LABEL: func.func @batch_norm_stats
// CHECK: %[[F:.*]]:2 = kiln.fusion "fusion_0"(%{{.*}}) : (tensor<4x3x5x5xf32>) -> (tensor<3xf32>, tensor<3xf32>)
// CHECK-DAG: kiln.mul
// CHECK-DAG: kiln.reduce_sum %{{.*}} [0, 2, 3]
// CHECK: kiln.yield
// CHECK-NOT: kiln.reduce_sum
// CHECK: return %[[F]]#0, %[[F]]#1
func.func @batch_norm_stats(%x: tensor<4x3x5x5xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %s = kiln.reduce_sum %x [0, 2, 3] : tensor<4x3x5x5xf32> -> tensor<3xf32>
  %sq = kiln.mul %x, %x : tensor<4x3x5x5xf32>
  %ss = kiln.reduce_sum %sq [0, 2, 3] : tensor<4x3x5x5xf32> -> tensor<3xf32>
  return %s, %ss : tensor<3xf32>, tensor<3xf32>
}
