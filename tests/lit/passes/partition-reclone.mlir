// kiln-partition: per-use recomputation. A recomputed value used again more
// than recompute-distance cloned ops after its last clone (and of at least
// recompute-min-bytes) is cloned again just before that use instead of being
// held in between; the report counts every clone.
// RUN: kiln-opt %s -kiln-remat -kiln-partition="recompute-distance=2 recompute-min-bytes=0" | FileCheck %s --check-prefix=FAR
// RUN: kiln-opt %s -kiln-remat -kiln-partition | FileCheck %s --check-prefix=DEF
// RUN: kiln-opt %s -kiln-remat -kiln-partition="recompute-distance=2 recompute-min-bytes=257" | FileCheck %s --check-prefix=DEF

// t = tanh(h) is recomputed from the saved matmul result h (which backward
// reads too, so saving t would cost more); backward reads t at g1 and, five
// ops later, at g2.
// FAR-LABEL: func.func @backward
// FAR-SAME: %[[H:[^:]+]]: tensor<4x16xf32> {kiln.role = "saved"}
// FAR-SAME: kiln.recompute_flops = 128 : i64, kiln.recomputed = {kiln.tanh = 2 : i64}
// FAR: %[[T1:.*]] = kiln.tanh %[[H]]
// FAR-NEXT: kiln.mul %{{.*}}, %[[T1]]
// FAR: kiln.neg
// FAR-NEXT: %[[T2:.*]] = kiln.tanh %[[H]]
// FAR-NEXT: kiln.mul %{{.*}}, %[[T2]]
// FAR-NOT: kiln.tanh
// FAR: return
// DEF-LABEL: func.func @backward
// DEF-SAME: kiln.recompute_flops = 64 : i64, kiln.recomputed = {kiln.tanh = 1 : i64}
// DEF: %[[T:.*]] = kiln.tanh
// DEF-NOT: kiln.tanh
// DEF: kiln.neg
// DEF-NEXT: kiln.mul %{{.*}}, %[[T]]
func.func @joint(%x: tensor<4x8xf32> {kiln.role = "primal"},
                 %w: tensor<8x16xf32> {kiln.role = "primal"},
                 %g: tensor<4x16xf32> {kiln.role = "tangent"})
    -> (tensor<4x16xf32>, tensor<8x16xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %h = kiln.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %t = kiln.tanh %h : tensor<4x16xf32>
  %y = kiln.mul %t, %t : tensor<4x16xf32>
  %g1 = kiln.mul %g, %t : tensor<4x16xf32>
  %a1 = kiln.exp %g1 : tensor<4x16xf32>
  %a2 = kiln.mul %a1, %a1 : tensor<4x16xf32>
  %a3 = kiln.add %a2, %g1 : tensor<4x16xf32>
  %a4 = kiln.neg %a3 : tensor<4x16xf32>
  %g2 = kiln.mul %a4, %t : tensor<4x16xf32>
  %g3 = kiln.mul %g2, %h : tensor<4x16xf32>
  %xt = kiln.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %gw = kiln.matmul %xt, %g3 : tensor<8x4xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
  return %y, %gw : tensor<4x16xf32>, tensor<8x16xf32>
}
