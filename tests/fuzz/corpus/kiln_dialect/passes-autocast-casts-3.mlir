
func.func @compose(%a: tensor<4xbf16>) -> tensor<4xf16> {
  %f = kiln.convert %a : tensor<4xbf16> -> tensor<4xf32>
  %h = kiln.convert %f : tensor<4xf32> -> tensor<4xf16>
  return %h : tensor<4xf16>
}

