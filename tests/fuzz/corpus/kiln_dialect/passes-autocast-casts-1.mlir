
func.func @narrow_then_widen(%x: tensor<4xf32>) -> tensor<4xf32> {
  %n = kiln.convert %x : tensor<4xf32> -> tensor<4xbf16>
  %f = kiln.convert %n : tensor<4xbf16> -> tensor<4xf32>
  %e = kiln.exp %f : tensor<4xf32>
  return %e : tensor<4xf32>
}

