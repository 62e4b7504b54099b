
func.func @fusion_row_column_broadcast(%a: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %r = kiln.fusion "fusion_0" (%a, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %v: tensor<8xf32>):
    %s = kiln.reduce_sum %x [1] : tensor<4x8xf32> -> tensor<4xf32>
    %b = kiln.broadcast %v : tensor<8xf32> -> tensor<4x8xf32>
    %d = kiln.sub %x, %b : tensor<4x8xf32>
    kiln.yield %d : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

