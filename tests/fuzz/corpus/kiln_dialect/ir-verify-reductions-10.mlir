
func.func @reduce_max_dynamic(%a: tensor<4x?xf32>) -> tensor<4xf32> {
  %0 = kiln.reduce_max %a [1] : tensor<4x?xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
