
func.func @fusion_yield_count(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %r:2 = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%x: tensor<4xf32>):
    kiln.yield %x : tensor<4xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf32>
}

