
func.func @reduce_duplicate(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  %0 = kiln.reduce_sum %a [1, 1] : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

