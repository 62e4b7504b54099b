
func.func @reshape_constant() -> tensor<2x4xf32> {
  %c = kiln.constant -1.0 : tensor<8xf32>
  %0 = kiln.reshape %c : tensor<8xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

