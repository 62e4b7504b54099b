
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

