
func.func @joint(%x: tensor<4x8xf32> {kiln.role = "primal"},
                 %w: tensor<8x16xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<8x16xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %h = kiln.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %t = kiln.tanh %h : tensor<4x16xf32>
  %a = kiln.mul %h, %t : tensor<4x16xf32>
  %s = kiln.mul %a, %a : tensor<4x16xf32>
  %y = kiln.reduce_sum %s [1] : tensor<4x16xf32> -> tensor<4xf32>
  %g1 = kiln.reshape %g : tensor<4xf32> -> tensor<4x1xf32>
  %gs = kiln.broadcast %g1 : tensor<4x1xf32> -> tensor<4x16xf32>
  %two = kiln.constant 2.0 : tensor<4x16xf32>
  %a2 = kiln.mul %a, %two : tensor<4x16xf32>
  %ga = kiln.mul %gs, %a2 : tensor<4x16xf32>
  %one = kiln.constant 1.0 : tensor<4x16xf32>
  %tt = kiln.mul %t, %t : tensor<4x16xf32>
  %d = kiln.sub %one, %tt : tensor<4x16xf32>
  %hd = kiln.mul %h, %d : tensor<4x16xf32>
  %dd = kiln.add %t, %hd : tensor<4x16xf32>
  %gh = kiln.mul %ga, %dd : tensor<4x16xf32>
  %xt = kiln.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %gw = kiln.matmul %xt, %gh : tensor<8x4xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
  return %y, %gw : tensor<4xf32>, tensor<8x16xf32>
}

