
func.func @transpose_perm_long(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %0 = kiln.transpose %a [1, 0, 2] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

