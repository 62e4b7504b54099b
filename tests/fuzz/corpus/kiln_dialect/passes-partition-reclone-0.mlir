
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
