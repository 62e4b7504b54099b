
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

