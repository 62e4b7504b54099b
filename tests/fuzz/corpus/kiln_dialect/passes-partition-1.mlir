
func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %c = kiln.constant 3.0 : tensor<4xf32>
  %y = kiln.mul %x, %c : tensor<4xf32>
  %gx = kiln.mul %g, %c : tensor<4xf32>
  return %y, %gx : tensor<4xf32>, tensor<4xf32>
}

