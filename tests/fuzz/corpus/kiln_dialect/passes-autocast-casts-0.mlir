

func.func @widen_then_narrow(%a: tensor<4x8xbf16>, %w: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %af = kiln.convert %a : tensor<4x8xbf16> -> tensor<4x8xf32>
  %mm = kiln.matmul %af, %w : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
  return %mm : tensor<4x2xf32>
}

