
func.func @broadcast_element(%a: tensor<8xi64>) -> tensor<4x8xf32> {
  %0 = kiln.broadcast %a : tensor<8xi64> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

