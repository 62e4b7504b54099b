// kiln-remat with convolutions: a conv is an extern op (Ops.def category
// Extern, FLOP model Conv = 2*N*Cout*Hout*Wout*Cin/groups*kH*kW), priced like
// a GEMM, so the cut saves the conv's result and recomputes the cheap
// pointwise chain after it, never the conv (the matmul case of remat.mlir
// with h = conv2d(x, w)).
// RUN: kiln-opt %s -kiln-remat -kiln-partition | FileCheck %s

// h = conv2d(x, w) [1, 3, 4, 4] (192 B), t = tanh(h), a = h * t, y = sum(a * a)
// over [1, 2, 3]. Backward reads h, t and a: saving h alone (192 B) and
// recomputing tanh and mul is the cheapest cut; the weight gradient is a
// kiln.conv2d_weight_grad of the primal x.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: kiln.num_saved = 1 : i64, kiln.saved_bytes = 192 : i64
// CHECK: %[[H:.*]] = kiln.conv2d
// CHECK: return %{{.*}}, %[[H]] :
// CHECK-LABEL: func.func @backward
// CHECK-SAME: kiln.recomputed = {kiln.mul = 1 : i64, kiln.tanh = 1 : i64}
// CHECK-NOT: kiln.conv2d stride
// CHECK: kiln.conv2d_weight_grad
// CHECK: return
func.func @joint(%x: tensor<1x2x4x4xf32> {kiln.role = "primal"},
                 %w: tensor<3x2x3x3xf32> {kiln.role = "primal"},
                 %g: tensor<1xf32> {kiln.role = "tangent"})
    -> (tensor<1xf32>, tensor<3x2x3x3xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %h = kiln.conv2d %x, %w stride [1, 1] padding [1, 1] dilation [1, 1] groups 1 : tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32> -> tensor<1x3x4x4xf32>
  %t = kiln.tanh %h : tensor<1x3x4x4xf32>
  %a = kiln.mul %h, %t : tensor<1x3x4x4xf32>
  %s = kiln.mul %a, %a : tensor<1x3x4x4xf32>
  %y = kiln.reduce_sum %s [1, 2, 3] : tensor<1x3x4x4xf32> -> tensor<1xf32>
  %g1 = kiln.reshape %g : tensor<1xf32> -> tensor<1x1x1x1xf32>
  %gs = kiln.broadcast %g1 : tensor<1x1x1x1xf32> -> tensor<1x3x4x4xf32>
  %two = kiln.constant 2.0 : tensor<1x3x4x4xf32>
  %a2 = kiln.mul %a, %two : tensor<1x3x4x4xf32>
  %ga = kiln.mul %gs, %a2 : tensor<1x3x4x4xf32>
  %one = kiln.constant 1.0 : tensor<1x3x4x4xf32>
  %tt = kiln.mul %t, %t : tensor<1x3x4x4xf32>
  %d = kiln.sub %one, %tt : tensor<1x3x4x4xf32>
  %hd = kiln.mul %h, %d : tensor<1x3x4x4xf32>
  %dd = kiln.add %t, %hd : tensor<1x3x4x4xf32>
  %gh = kiln.mul %ga, %dd : tensor<1x3x4x4xf32>
  %gw = kiln.conv2d_weight_grad %x, %gh stride [1, 1] padding [1, 1] dilation [1, 1] groups 1 : tensor<1x2x4x4xf32>, tensor<1x3x4x4xf32> -> tensor<3x2x3x3xf32>
  return %y, %gw : tensor<1xf32>, tensor<3x2x3x3xf32>
}
