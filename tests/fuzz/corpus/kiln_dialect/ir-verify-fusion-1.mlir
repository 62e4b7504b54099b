
func.func @fusion_extra_arg(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
    kiln.yield %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

