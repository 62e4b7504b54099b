// The math ops (sqrt, rsqrt, tanh, abs, sin, cos, pow) are elementwise: they
// fuse like exp/log; a batched kiln.matmul stays outside fusions.
// RUN: kiln-opt %s -kiln-fuse | FileCheck %s

// CHECK-LABEL: func.func @gelu_tanh_like
// CHECK: kiln.fusion "fusion_0"
// CHECK-DAG: kiln.pow %{{.*}}, 3.000000e+00
// CHECK-DAG: kiln.tanh
// CHECK-DAG: kiln.sqrt
// CHECK-DAG: kiln.rsqrt
// CHECK-DAG: kiln.abs
// CHECK-DAG: kiln.sin
// CHECK-DAG: kiln.cos
// CHECK: kiln.yield
// CHECK-NOT: kiln.fusion
// CHECK: return
func.func @gelu_tanh_like(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.pow %x, 3.0 : tensor<4x8xf32>
  %1 = kiln.add %x, %0 : tensor<4x8xf32>
  %2 = kiln.tanh %1 : tensor<4x8xf32>
  %3 = kiln.abs %2 : tensor<4x8xf32>
  %4 = kiln.sqrt %3 : tensor<4x8xf32>
  %5 = kiln.sin %4 : tensor<4x8xf32>
  %6 = kiln.cos %5 : tensor<4x8xf32>
  %7 = kiln.rsqrt %6 : tensor<4x8xf32>
  return %7 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @batched
// CHECK: %[[M:.*]] = kiln.matmul %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// CHECK: kiln.fusion "fusion_1"(%[[M]])
// CHECK: kiln.tanh
func.func @batched(%a: tensor<2x4x8xf32>, %b: tensor<2x8x16xf32>) -> tensor<2x4x16xf32> {
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<2x4x16xf32>
  %1 = kiln.tanh %0 : tensor<2x4x16xf32>
  return %1 : tensor<2x4x16xf32>
}
