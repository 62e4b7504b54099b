
func.func @fusion_row_leading_reduction(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %s = kiln.reduce_sum %x [0] : tensor<4x8xf32> -> tensor<8xf32>
    %k = kiln.reshape %s : tensor<8xf32> -> tensor<1x8xf32>
    %b = kiln.broadcast %k : tensor<1x8xf32> -> tensor<4x8xf32>
    kiln.yield %b : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

