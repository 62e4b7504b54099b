
func.func @reduce_max_element(%a: tensor<4x8xf32>) -> tensor<4xi64> {
  %0 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

