
func.func @reshape_element(%a: tensor<4x8xf32>) -> tensor<32xbf16> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<32xbf16>
  return %0 : tensor<32xbf16>
}

