
func.func @fusion_not_isolated(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = kiln.fusion "fusion_0" () : () -> tensor<4xf32> {
    %n = kiln.neg %a : tensor<4xf32>
    kiln.yield %n : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

