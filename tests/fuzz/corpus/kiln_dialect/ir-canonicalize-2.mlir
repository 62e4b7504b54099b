
func.func @reshape_roundtrip(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<32xf32>
  %1 = kiln.reshape %0 : tensor<32xf32> -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

