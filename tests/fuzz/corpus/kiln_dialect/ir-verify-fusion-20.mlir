
func.func @fusion_row_no_reduction(%a: tensor<4x1xf32>) -> tensor<4x8xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x1xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x1xf32>):
    %b = kiln.broadcast %x : tensor<4x1xf32> -> tensor<4x8xf32>
    kiln.yield %b : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

