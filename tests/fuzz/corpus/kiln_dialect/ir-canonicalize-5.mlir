
func.func @transpose_transpose_cancel(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.transpose %a [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %1 = kiln.transpose %0 [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

