
func.func @broadcast_shrink(%a: tensor<4x8xf32>) -> tensor<1x8xf32> {
  %0 = kiln.broadcast %a : tensor<4x8xf32> -> tensor<1x8xf32>
  return %0 : tensor<1x8xf32>
}

