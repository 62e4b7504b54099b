
func.func @same_type(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<4x2xbf16> {
  %mm = kiln.matmul %x, %w : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
  %r = kiln.convert %mm : tensor<4x2xf32> -> tensor<4x2xbf16>
  return %r : tensor<4x2xbf16>
}

