
func.func @reduce_all_not_scalar(%a: tensor<4x8xf32>) -> tensor<1xf32> {
  %0 = kiln.reduce_sum %a [0, 1] : tensor<4x8xf32> -> tensor<1xf32>
  return %0 : tensor<1xf32>
}

