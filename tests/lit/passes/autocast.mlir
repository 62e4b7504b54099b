// kiln-autocast: where the casts go in a matmul + softmax + layer_norm graph
// (attention scores, then a layer norm over them), bf16 and f16.
// RUN: kiln-opt %s -kiln-autocast="dtype=bf16" | FileCheck %s --check-prefixes=CHECK,BF16
// RUN: kiln-opt %s -kiln-autocast="dtype=f16" | FileCheck %s --check-prefixes=CHECK,F16

// The matmul runs in the low type: its f32 operands are converted (k before
// its transpose, so the cast reads the weight contiguously). The scale
// constant is weak: it is re-created in the low type instead of promoting
// the scores. reduce_max, the reshape/broadcast and the sub have no policy
// and stay in the low type; exp is f32, so only its input is converted; the
// softmax sum and division are f32. The layer norm's reduce_sum is f32, and
// its sub promotes: both use ONE convert of the scores to f32. pow, rsqrt
// and the affine scale are f32. Nothing needs converting at the return.
// CHECK: module attributes {kiln.autocast = {casts_inserted = 4 : i64, casts_removed = 0 : i64,
// BF16-SAME: dtype = "bf16", low_precision_ops = {broadcast = 1 : i64, matmul = 1 : i64, mul = 1 : i64, reduce_max = 1 : i64, reshape = 1 : i64, sub = 1 : i64, transpose = 1 : i64}}}
// F16-SAME: dtype = "f16", low_precision_ops = {broadcast = 1 : i64, matmul = 1 : i64, mul = 1 : i64, reduce_max = 1 : i64, reshape = 1 : i64, sub = 1 : i64, transpose = 1 : i64}}}
// CHECK-LABEL: func.func @scores
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<4x8xf32>, %[[K:[^:]+]]: tensor<4x8xf32>, %[[G:[^:]+]]: tensor<4xf32>)
// CHECK-SAME: -> (tensor<4x4xf32>, tensor<4x4xf32>)
// CHECK-DAG: %[[KL:.*]] = kiln.convert %[[K]] : tensor<4x8xf32> -> tensor<4x8x[[T:bf16|f16]]>
// CHECK-DAG: %[[QL:.*]] = kiln.convert %[[Q]] : tensor<4x8xf32> -> tensor<4x8x[[T]]>
// CHECK: %[[KT:.*]] = kiln.transpose %[[KL]] [1, 0] : tensor<4x8x[[T]]> -> tensor<8x4x[[T]]>
// CHECK: %[[S:.*]] = kiln.matmul %[[QL]], %[[KT]] : tensor<4x8x[[T]]>, tensor<8x4x[[T]]> -> tensor<4x4x[[T]]>
// CHECK: %[[SF:.*]] = kiln.convert %[[S]] : tensor<4x4x[[T]]> -> tensor<4x4xf32>
// CHECK: %[[C:.*]] = kiln.constant 1.250000e-01 : tensor<4x4x[[T]]>
// CHECK-NOT: kiln.constant 1.250000e-01 : tensor<4x4xf32>
// CHECK: %[[SS:.*]] = kiln.mul %[[S]], %[[C]] : tensor<4x4x[[T]]>
// CHECK: %[[M:.*]] = kiln.reduce_max %[[SS]] [1] : tensor<4x4x[[T]]> -> tensor<4x[[T]]>
// CHECK: kiln.reshape %[[M]] : tensor<4x[[T]]> -> tensor<4x1x[[T]]>
// CHECK: %[[MB:.*]] = kiln.broadcast %{{.*}} : tensor<4x1x[[T]]> -> tensor<4x4x[[T]]>
// CHECK: %[[D:.*]] = kiln.sub %[[SS]], %[[MB]] : tensor<4x4x[[T]]>
// CHECK: %[[DF:.*]] = kiln.convert %[[D]] : tensor<4x4x[[T]]> -> tensor<4x4xf32>
// CHECK: %[[E:.*]] = kiln.exp %[[DF]] : tensor<4x4xf32>
// CHECK: kiln.reduce_sum %[[E]] [1] : tensor<4x4xf32> -> tensor<4xf32>
// CHECK: %[[P:.*]] = kiln.div %[[E]], %{{.*}} : tensor<4x4xf32>
// CHECK: kiln.reduce_sum %[[SF]] [1] : tensor<4x4xf32> -> tensor<4xf32>
// CHECK: %[[XC:.*]] = kiln.sub %[[SF]], %{{.*}} : tensor<4x4xf32>
// CHECK: kiln.pow %[[XC]], 2.000000e+00 : tensor<4x4xf32>
// CHECK: kiln.rsqrt %{{.*}} : tensor<4xf32>
// CHECK: %[[GB:.*]] = kiln.broadcast %[[G]] : tensor<4xf32> -> tensor<4x4xf32>
// CHECK: %[[O:.*]] = kiln.mul %{{.*}}, %[[GB]] : tensor<4x4xf32>
// CHECK-NOT: kiln.convert
// CHECK: return %[[P]], %[[O]] : tensor<4x4xf32>, tensor<4x4xf32>
func.func @scores(%q: tensor<4x8xf32>, %k: tensor<4x8xf32>, %gamma: tensor<4xf32>)
    -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %kt = kiln.transpose %k [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %s = kiln.matmul %q, %kt : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<4x4xf32>
  // softmax(s / 8) over dim 1
  %c = kiln.constant 0.125 : tensor<4x4xf32>
  %ss = kiln.mul %s, %c : tensor<4x4xf32>
  %m = kiln.reduce_max %ss [1] : tensor<4x4xf32> -> tensor<4xf32>
  %mr = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %mb = kiln.broadcast %mr : tensor<4x1xf32> -> tensor<4x4xf32>
  %d = kiln.sub %ss, %mb : tensor<4x4xf32>
  %e = kiln.exp %d : tensor<4x4xf32>
  %z = kiln.reduce_sum %e [1] : tensor<4x4xf32> -> tensor<4xf32>
  %zr = kiln.reshape %z : tensor<4xf32> -> tensor<4x1xf32>
  %zb = kiln.broadcast %zr : tensor<4x1xf32> -> tensor<4x4xf32>
  %p = kiln.div %e, %zb : tensor<4x4xf32>
  // layer_norm(s) over dim 1, times gamma
  %sum = kiln.reduce_sum %s [1] : tensor<4x4xf32> -> tensor<4xf32>
  %quarter = kiln.constant 0.25 : tensor<4xf32>
  %mean = kiln.mul %sum, %quarter : tensor<4xf32>
  %meanr = kiln.reshape %mean : tensor<4xf32> -> tensor<4x1xf32>
  %meanb = kiln.broadcast %meanr : tensor<4x1xf32> -> tensor<4x4xf32>
  %xc = kiln.sub %s, %meanb : tensor<4x4xf32>
  %sq = kiln.pow %xc, 2.0 : tensor<4x4xf32>
  %vsum = kiln.reduce_sum %sq [1] : tensor<4x4xf32> -> tensor<4xf32>
  %var = kiln.mul %vsum, %quarter : tensor<4xf32>
  %eps = kiln.constant 1.0e-05 : tensor<4xf32>
  %ve = kiln.add %var, %eps : tensor<4xf32>
  %r = kiln.rsqrt %ve : tensor<4xf32>
  %rr = kiln.reshape %r : tensor<4xf32> -> tensor<4x1xf32>
  %rb = kiln.broadcast %rr : tensor<4x1xf32> -> tensor<4x4xf32>
  %y = kiln.mul %xc, %rb : tensor<4x4xf32>
  %gb = kiln.broadcast %gamma : tensor<4xf32> -> tensor<4x4xf32>
  %o = kiln.mul %y, %gb : tensor<4x4xf32>
  return %p, %o : tensor<4x4xf32>, tensor<4x4xf32>
}
