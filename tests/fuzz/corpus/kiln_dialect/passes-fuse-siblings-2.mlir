
func.func @different_dims(%a: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kiln.reduce_sum %a [0] : tensor<4x4xf32> -> tensor<4xf32>
  %1 = kiln.reduce_sum %a [1] : tensor<4x4xf32> -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

