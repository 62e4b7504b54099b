
func.func @transpose_dynamic(%a: tensor<4x?xf32>) -> tensor<?x4xf32> {
  %0 = kiln.transpose %a [1, 0] : tensor<4x?xf32> -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

