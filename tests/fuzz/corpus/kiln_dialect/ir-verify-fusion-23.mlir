
func.func @fusion_row_reshape_space(%a: tensor<4x8xf32>) -> tensor<32xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<32xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %s = kiln.reduce_sum %x [1] : tensor<4x8xf32> -> tensor<4xf32>
    %f = kiln.reshape %x : tensor<4x8xf32> -> tensor<32xf32>
    kiln.yield %f : tensor<32xf32>
  }
  return %r : tensor<32xf32>
}
