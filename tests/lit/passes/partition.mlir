// kiln-partition: @joint -> @forward + @backward.
// RUN: kiln-opt %s -kiln-partition -split-input-file | FileCheck %s

// y = relu(x @ transpose(w)); backward gives grad_x. The matmul result is
// saved (the relu mask needs it); transpose(w) is re-materialized in
// @backward instead of being saved; relu's result is not needed.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xf32> {kiln.role = "primal"}, %[[W:[^:]+]]: tensor<16x8xf32> {kiln.role = "primal"})
// CHECK-SAME: -> (tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK-SAME: kiln.num_forward_outputs = 1 : i64, kiln.num_saved = 1 : i64
// CHECK: %[[WT:.*]] = kiln.transpose %[[W]] [1, 0]
// CHECK: %[[MM:.*]] = kiln.matmul %[[X]], %[[WT]]
// CHECK: %[[Y:.*]] = kiln.relu %[[MM]]
// CHECK-NOT: kiln.compare
// CHECK: return %[[Y]], %[[MM]]
// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%{{.*}}: tensor<4x8xf32> {kiln.role = "primal"}, %[[BW:[^:]+]]: tensor<16x8xf32> {kiln.role = "primal"}, %[[S:[^:]+]]: tensor<4x16xf32> {kiln.role = "saved"}, %[[G:[^:]+]]: tensor<4x16xf32> {kiln.role = "tangent"})
// CHECK-SAME: -> tensor<4x8xf32>
// CHECK-SAME: kiln.num_saved = 1 : i64
// CHECK-DAG: %[[BWT:.*]] = kiln.transpose %[[BW]] [1, 0]
// CHECK-DAG: kiln.compare gt, %[[S]], %{{.*}}
// CHECK: kiln.matmul %[[BWT]], %{{.*}}
// CHECK-NOT: kiln.relu
// CHECK: return
func.func @joint(%x: tensor<4x8xf32> {kiln.role = "primal"},
                 %w: tensor<16x8xf32> {kiln.role = "primal"},
                 %g: tensor<4x16xf32> {kiln.role = "tangent"})
    -> (tensor<4x16xf32>, tensor<4x8xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %wt = kiln.transpose %w [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %mm = kiln.matmul %x, %wt : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %y = kiln.relu %mm : tensor<4x16xf32>
  %zero = kiln.constant 0.0 : tensor<4x16xf32>
  %mask = kiln.compare gt, %mm, %zero : tensor<4x16xf32>
  %gz = kiln.select %mask, %g, %zero : tensor<4x16xf32>
  %gzt = kiln.transpose %gz [1, 0] : tensor<4x16xf32> -> tensor<16x4xf32>
  %gxt = kiln.matmul %wt, %gzt : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>
  %gx = kiln.transpose %gxt [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  return %y, %gx : tensor<4x16xf32>, tensor<4x8xf32>
}

// -----

// A constant used by forward and backward is cloned, not saved.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: kiln.num_saved = 0 : i64
// CHECK: kiln.constant 3.000000e+00
// CHECK-LABEL: func.func @backward
// CHECK-SAME: (%{{.*}}: tensor<4xf32> {kiln.role = "primal"}, %[[G:[^:]+]]: tensor<4xf32> {kiln.role = "tangent"})
// CHECK: %[[C:.*]] = kiln.constant 3.000000e+00
// CHECK: kiln.mul %[[G]], %[[C]]
func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %c = kiln.constant 3.0 : tensor<4xf32>
  %y = kiln.mul %x, %c : tensor<4xf32>
  %gx = kiln.mul %g, %c : tensor<4xf32>
  return %y, %gx : tensor<4xf32>, tensor<4xf32>
}

// -----

// Saved values come in program order, whatever order backward uses them.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: kiln.num_saved = 2 : i64
// CHECK: %[[E:.*]] = kiln.exp
// CHECK: %[[L:.*]] = kiln.log
// CHECK: return %{{.*}}, %[[E]], %[[L]]
// CHECK-LABEL: func.func @backward
// CHECK-SAME: %[[SE:[^:]+]]: tensor<4xf32> {kiln.role = "saved"}, %[[SL:[^:]+]]: tensor<4xf32> {kiln.role = "saved"}
// CHECK: kiln.mul %{{.*}}, %[[SL]]
// CHECK: kiln.mul %{{.*}}, %[[SE]]
func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %e = kiln.exp %x : tensor<4xf32>
  %l = kiln.log %e : tensor<4xf32>
  %y = kiln.add %e, %l : tensor<4xf32>
  %a = kiln.mul %g, %l : tensor<4xf32>
  %b = kiln.mul %a, %e : tensor<4xf32>
  return %y, %b : tensor<4xf32>, tensor<4xf32>
}

// -----

// Forward-only graph: renamed @forward, nothing saved, no @backward.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: kiln.num_forward_outputs = 1 : i64, kiln.num_saved = 0 : i64
// CHECK: kiln.exp
// CHECK-NOT: func.func @backward
// CHECK-NOT: func.func @joint
func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"}) -> tensor<4xf32>
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %e = kiln.exp %x : tensor<4xf32>
  return %e : tensor<4xf32>
}

