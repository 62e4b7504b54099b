
func.func @broadcast_used_outside(%a: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %m = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %mr = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %mb = kiln.broadcast %mr : tensor<4x1xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %mb : tensor<4x8xf32>
  return %0, %mb : tensor<4x8xf32>, tensor<4x8xf32>
}

