
func.func @fusion_yield_nothing(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    kiln.yield
  }
  return %r : tensor<4xf32>
}

