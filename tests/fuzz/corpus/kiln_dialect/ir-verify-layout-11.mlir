
func.func @broadcast_rank(%a: tensor<2x4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.broadcast %a : tensor<2x4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

