
func.func @broadcast_dim(%a: tensor<3xf32>) -> tensor<4x8xf32> {
  %0 = kiln.broadcast %a : tensor<3xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

