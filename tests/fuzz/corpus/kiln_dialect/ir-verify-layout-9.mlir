
func.func @broadcast_left_aligned(%a: tensor<4xf32>) -> tensor<4x8xf32> {
  %0 = kiln.broadcast %a : tensor<4xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

