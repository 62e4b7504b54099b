
func.func @softmax(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %mr = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %mb = kiln.broadcast %mr : tensor<4x1xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %mb : tensor<4x8xf32>
  %1 = kiln.exp %0 : tensor<4x8xf32>
  %s = kiln.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
  %sr = kiln.reshape %s : tensor<4xf32> -> tensor<4x1xf32>
  %sb = kiln.broadcast %sr : tensor<4x1xf32> -> tensor<4x8xf32>
  %2 = kiln.div %1, %sb : tensor<4x8xf32>
  return %2 : tensor<4x8xf32>
}
