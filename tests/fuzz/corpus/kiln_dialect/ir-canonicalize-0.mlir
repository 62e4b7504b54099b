
func.func @reshape_same_type(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

