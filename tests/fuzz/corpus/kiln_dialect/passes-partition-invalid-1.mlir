
func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  return %g, %x : tensor<4xf32>, tensor<4xf32>
}
