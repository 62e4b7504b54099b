
func.func @select_cond_shape(%c: tensor<1xi1>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "kiln.select"(%c, %a, %b) : (tensor<1xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

