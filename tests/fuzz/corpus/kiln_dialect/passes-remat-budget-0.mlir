
func.func @joint(%x: tensor<4x2xf32> {kiln.role = "primal"},
                 %wa: tensor<2x32xf32> {kiln.role = "primal"},
                 %x2: tensor<4x64xf32> {kiln.role = "primal"},
                 %wb: tensor<64x8xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<2x32xf32>, tensor<64x8xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %a = kiln.matmul %x, %wa : tensor<4x2xf32>, tensor<2x32xf32> -> tensor<4x32xf32>
  %ya = kiln.tanh %a : tensor<4x32xf32>
  %b = kiln.matmul %x2, %wb : tensor<4x64xf32>, tensor<64x8xf32> -> tensor<4x8xf32>
  %yb = kiln.exp %b : tensor<4x8xf32>
  %sa = kiln.reduce_sum %ya [1] : tensor<4x32xf32> -> tensor<4xf32>
  %sb = kiln.reduce_sum %yb [1] : tensor<4x8xf32> -> tensor<4xf32>
  %o = kiln.add %sa, %sb : tensor<4xf32>
  %g2 = kiln.reshape %g : tensor<4xf32> -> tensor<4x1xf32>
  %gya = kiln.broadcast %g2 : tensor<4x1xf32> -> tensor<4x32xf32>
  %one = kiln.constant 1.0 : tensor<4x32xf32>
  %ya2 = kiln.mul %ya, %ya : tensor<4x32xf32>
  %da = kiln.sub %one, %ya2 : tensor<4x32xf32>
  %ga = kiln.mul %gya, %da : tensor<4x32xf32>
  %xt = kiln.transpose %x [1, 0] : tensor<4x2xf32> -> tensor<2x4xf32>
  %gwa = kiln.matmul %xt, %ga : tensor<2x4xf32>, tensor<4x32xf32> -> tensor<2x32xf32>
  %gyb = kiln.broadcast %g2 : tensor<4x1xf32> -> tensor<4x8xf32>
  %gb = kiln.mul %gyb, %yb : tensor<4x8xf32>
  %x2t = kiln.transpose %x2 [1, 0] : tensor<4x64xf32> -> tensor<64x4xf32>
  %gwb = kiln.matmul %x2t, %gb : tensor<64x4xf32>, tensor<4x8xf32> -> tensor<64x8xf32>
  return %o, %gwa, %gwb : tensor<4xf32>, tensor<2x32xf32>, tensor<64x8xf32>
}
