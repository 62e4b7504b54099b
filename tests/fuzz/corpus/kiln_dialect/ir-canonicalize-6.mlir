
func.func @transpose_compose(%a: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = kiln.transpose %a [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %1 = kiln.transpose %0 [1, 2, 0] : tensor<3x4x2xf32> -> tensor<4x2x3xf32>
  return %1 : tensor<4x2x3xf32>
}

