
func.func @fusion_transpose(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<8x4xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %t = kiln.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
    kiln.yield %t : tensor<8x4xf32>
  }
  return %r : tensor<8x4xf32>
}

