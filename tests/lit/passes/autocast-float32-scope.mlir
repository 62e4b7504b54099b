// kiln-autocast and the float32 scope: ops marked kiln.autocast_fp32 (the
// tracer's ir::Node::float32_scope: recorded inside softmax/log_softmax/
// layer_norm, their backwards, gradient sums) compute in f32 even where
// their own policy would promote to bf16; matmuls keep lower precision; the
// marks are removed.
// RUN: kiln-opt %s -kiln-autocast="dtype=bf16" | FileCheck %s

// The matmul result is bf16. Unmarked, `sub` of two bf16 values runs in
// bf16 (promote). Marked, it runs in f32: both operands converted.
// CHECK-LABEL: func.func @marked_sub_runs_in_f32
// (One convert of the matmul result, placed after it, serves the marked sub.)
// CHECK: %[[MM:.*]] = kiln.matmul {{.*}} -> tensor<4x4xbf16>
// CHECK: %[[F:.*]] = kiln.convert %[[MM]] : tensor<4x4xbf16> -> tensor<4x4xf32>
// CHECK: kiln.sub %[[MM]], %[[MM]] : tensor<4x4xbf16>
// CHECK: kiln.sub %[[F]], %[[F]] : tensor<4x4xf32>
// CHECK-NOT: kiln.autocast_fp32
func.func @marked_sub_runs_in_f32(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %mm = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<4x4xf32>
  %plain = kiln.sub %mm, %mm : tensor<4x4xf32>
  %marked = kiln.sub %mm, %mm {kiln.autocast_fp32} : tensor<4x4xf32>
  return %plain, %marked : tensor<4x4xf32>, tensor<4x4xf32>
}

// A marked matmul stays in the lower precision (its own policy wins).
// CHECK-LABEL: func.func @marked_matmul_stays_low
// CHECK: kiln.matmul {{.*}} -> tensor<4x4xbf16>
// CHECK-NOT: kiln.autocast_fp32
func.func @marked_matmul_stays_low(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>) -> tensor<4x4xf32> {
  %mm = kiln.matmul %a, %b {kiln.autocast_fp32} : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<4x4xf32>
  return %mm : tensor<4x4xf32>
}
