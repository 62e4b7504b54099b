
func.func @transpose_identity(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.transpose %a [0, 1] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

