
func.func @sibling_reductions(%a: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kiln.reduce_sum %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %1 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

