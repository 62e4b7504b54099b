
func.func @fusion_empty_block(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = "kiln.fusion"(%a) <{kernel = "fusion_0"}> ({
  ^bb0(%x: tensor<4xf32>):
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

