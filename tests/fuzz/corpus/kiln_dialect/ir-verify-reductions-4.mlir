
func.func @reduce_keepdim(%a: tensor<4x8xf32>) -> tensor<4x1xf32> {
  %0 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

