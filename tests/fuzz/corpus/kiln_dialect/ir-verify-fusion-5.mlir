
func.func @fusion_wrong_terminator(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    func.return %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

