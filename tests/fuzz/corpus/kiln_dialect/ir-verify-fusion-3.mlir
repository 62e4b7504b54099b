
func.func @fusion_second_arg_shape(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = kiln.fusion "fusion_0" (%a, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %y: tensor<8x4xf32>):
    kiln.yield %x : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

