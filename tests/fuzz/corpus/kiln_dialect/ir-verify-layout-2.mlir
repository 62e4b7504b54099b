
func.func @transpose_perm_duplicate(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %0 = kiln.transpose %a [1, 1] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

