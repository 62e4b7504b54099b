
func.func @fusion_nested(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %i = kiln.fusion "fusion_1" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%y: tensor<4xf32>):
      %n = kiln.neg %y : tensor<4xf32>
      kiln.yield %n : tensor<4xf32>
    }
    kiln.yield %i : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

