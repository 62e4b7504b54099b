
func.func @reduce_sum_element(%a: tensor<4x8xbf16>) -> tensor<4xf32> {
  %0 = kiln.reduce_sum %a [1] : tensor<4x8xbf16> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

