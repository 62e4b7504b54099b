
func.func @fusion_yield_second_element(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf16>) {
  %r:2 = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf16>) {
  ^bb0(%x: tensor<4xf32>):
    kiln.yield %x, %x : tensor<4xf32>, tensor<4xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf16>
}

