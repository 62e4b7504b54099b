
func.func @convert_same_type(%a: tensor<4xf16>) -> tensor<4xf16> {
  %0 = kiln.convert %a : tensor<4xf16> -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

