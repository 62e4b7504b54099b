
func.func @fusion_no_block(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = "kiln.fusion"(%a) <{kernel = "fusion_0"}> ({
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

