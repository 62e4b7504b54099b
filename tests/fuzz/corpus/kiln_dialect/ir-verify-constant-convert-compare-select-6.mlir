
func.func @convert_shape(%a: tensor<4x8xf32>) -> tensor<8x4xf16> {
  %0 = kiln.convert %a : tensor<4x8xf32> -> tensor<8x4xf16>
  return %0 : tensor<8x4xf16>
}

