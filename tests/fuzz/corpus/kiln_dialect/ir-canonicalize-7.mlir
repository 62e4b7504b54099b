
func.func @broadcast_constant() -> tensor<4x8xf32> {
  %c = kiln.constant 2.0 : tensor<8xf32>
  %0 = kiln.broadcast %c : tensor<8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

