
func.func @reduce_unsorted(%a: tensor<2x4x8xf32>) -> tensor<4xf32> {
  %0 = kiln.reduce_sum %a [2, 0] : tensor<2x4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

