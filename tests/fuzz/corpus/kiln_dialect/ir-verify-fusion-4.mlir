
func.func @fusion_no_terminator(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %n = kiln.neg %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

