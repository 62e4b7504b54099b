
func.func @stable_logsumexp(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  %m = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %r = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %b = kiln.broadcast %r : tensor<4x1xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %b : tensor<4x8xf32>
  %1 = kiln.exp %0 : tensor<4x8xf32>
  %2 = kiln.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
  %3 = kiln.log %2 : tensor<4xf32>
  %4 = kiln.add %3, %m : tensor<4xf32>
  return %4 : tensor<4xf32>
}

