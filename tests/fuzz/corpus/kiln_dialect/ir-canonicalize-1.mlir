
func.func @reshape_reshape(%a: tensor<4x8xf32>) -> tensor<32xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<2x16xf32>
  %1 = kiln.reshape %0 : tensor<2x16xf32> -> tensor<32xf32>
  return %1 : tensor<32xf32>
}

