// kiln-autocast on a joint forward+backward graph, then kiln-partition: the
// backward GEMMs run in bf16 too, arguments (f32 master weights, tangents)
// and results (output, gradients) keep their types.
// RUN: kiln-opt %s -kiln-autocast="dtype=bf16" | FileCheck %s
// RUN: kiln-opt %s -kiln-autocast="dtype=bf16" -kiln-partition | FileCheck %s --check-prefix=SPLIT

// y = relu(x W^T + b); grad_W = relu'(.)^T x; grad_x = relu'(.) W.
// W is converted once (before its transpose) and that cast serves the
// forward GEMM and grad_x's GEMM; the bias add promotes to f32, so the mask
// and the relu are f32; the masked gradient is converted for both backward
// GEMMs; their bf16 results are converted back at the return.
// CHECK-LABEL: func.func @joint
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xf32> {kiln.role = "primal"}, %[[W:[^:]+]]: tensor<16x8xf32> {kiln.role = "primal"}, %[[B:[^:]+]]: tensor<16xf32> {kiln.role = "primal"}, %[[G:[^:]+]]: tensor<4x16xf32> {kiln.role = "tangent"})
// CHECK-SAME: -> (tensor<4x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>)
// CHECK-DAG: %[[WL:.*]] = kiln.convert %[[W]] : tensor<16x8xf32> -> tensor<16x8xbf16>
// CHECK-DAG: %[[XL:.*]] = kiln.convert %[[X]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: %[[WT:.*]] = kiln.transpose %[[WL]] [1, 0] : tensor<16x8xbf16> -> tensor<8x16xbf16>
// CHECK: %[[MM:.*]] = kiln.matmul %[[XL]], %[[WT]] : tensor<4x8xbf16>, tensor<8x16xbf16> -> tensor<4x16xbf16>
// CHECK: %[[MMF:.*]] = kiln.convert %[[MM]] : tensor<4x16xbf16> -> tensor<4x16xf32>
// CHECK: %[[Z:.*]] = kiln.add %[[MMF]], %{{.*}} : tensor<4x16xf32>
// CHECK: %[[Y:.*]] = kiln.relu %[[Z]] : tensor<4x16xf32>
// CHECK: kiln.compare gt, %[[Z]], %{{.*}} : tensor<4x16xf32>
// CHECK: %[[GZ:.*]] = kiln.select %{{.*}}, %[[G]], %{{.*}} : tensor<4x16xf32>
// CHECK: %[[GZL:.*]] = kiln.convert %[[GZ]] : tensor<4x16xf32> -> tensor<4x16xbf16>
// CHECK: %[[GZT:.*]] = kiln.transpose %[[GZL]] [1, 0] : tensor<4x16xbf16> -> tensor<16x4xbf16>
// CHECK: %[[GW:.*]] = kiln.matmul %[[GZT]], %[[XL]] : tensor<16x4xbf16>, tensor<4x8xbf16> -> tensor<16x8xbf16>
// CHECK: %[[GWF:.*]] = kiln.convert %[[GW]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK: %[[GX:.*]] = kiln.matmul %[[GZL]], %[[WL]] : tensor<4x16xbf16>, tensor<16x8xbf16> -> tensor<4x8xbf16>
// CHECK: %[[GXF:.*]] = kiln.convert %[[GX]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: return %[[Y]], %[[GWF]], %[[GXF]] : tensor<4x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>

// Partitioned: forward saves the bf16 cast of W and x (computed once, as
// autocast's weight-cast cache) and the f32 pre-activation for the mask.
// SPLIT-LABEL: func.func @forward
// SPLIT-SAME: -> (tensor<4x16xf32>, tensor<16x8xbf16>, tensor<4x8xbf16>, tensor<4x16xf32>)
// SPLIT-LABEL: func.func @backward
// SPLIT-SAME: %{{.*}}: tensor<16x8xbf16> {kiln.role = "saved"}, %{{.*}}: tensor<4x8xbf16> {kiln.role = "saved"}, %{{.*}}: tensor<4x16xf32> {kiln.role = "saved"}, %{{.*}}: tensor<4x16xf32> {kiln.role = "tangent"}
// SPLIT-SAME: -> (tensor<16x8xf32>, tensor<4x8xf32>)
// SPLIT-COUNT-2: kiln.matmul {{.*}}bf16>
func.func @joint(%x: tensor<4x8xf32> {kiln.role = "primal"},
                 %w: tensor<16x8xf32> {kiln.role = "primal"},
                 %b: tensor<16xf32> {kiln.role = "primal"},
                 %g: tensor<4x16xf32> {kiln.role = "tangent"})
    -> (tensor<4x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %wt = kiln.transpose %w [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %mm = kiln.matmul %x, %wt : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %bb = kiln.broadcast %b : tensor<16xf32> -> tensor<4x16xf32>
  %z = kiln.add %mm, %bb : tensor<4x16xf32>
  %y = kiln.relu %z : tensor<4x16xf32>
  %zero = kiln.constant 0.0 : tensor<4x16xf32>
  %mask = kiln.compare gt, %z, %zero : tensor<4x16xf32>
  %gz = kiln.select %mask, %g, %zero : tensor<4x16xf32>
  %gzt = kiln.transpose %gz [1, 0] : tensor<4x16xf32> -> tensor<16x4xf32>
  %gw = kiln.matmul %gzt, %x : tensor<16x4xf32>, tensor<4x8xf32> -> tensor<16x8xf32>
  %gx = kiln.matmul %gz, %w : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  return %y, %gw, %gx : tensor<4x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>
}
