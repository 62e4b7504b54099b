
func.func @transpose_perm_short(%a: tensor<2x4x8xf32>) -> tensor<4x2x8xf32> {
  %0 = kiln.transpose %a [1, 0] : tensor<2x4x8xf32> -> tensor<4x2x8xf32>
  return %0 : tensor<4x2x8xf32>
}

