
func.func @fusion_row_ok(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %s = kiln.reduce_sum %x [1] : tensor<4x8xf32> -> tensor<4xf32>
    %k = kiln.reshape %s : tensor<4xf32> -> tensor<4x1xf32>
    %b = kiln.broadcast %k : tensor<4x1xf32> -> tensor<4x8xf32>
    %d = kiln.sub %x, %b : tensor<4x8xf32>
    kiln.yield %d : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

