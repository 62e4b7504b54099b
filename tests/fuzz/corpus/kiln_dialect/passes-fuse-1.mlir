
func.func @shape_boundary(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %1 = kiln.reshape %0 : tensor<4xf32> -> tensor<4x1xf32>
  %2 = kiln.broadcast %1 : tensor<4x1xf32> -> tensor<4x8xf32>
  %3 = kiln.sub %a, %2 : tensor<4x8xf32>
  %4 = kiln.exp %3 : tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

