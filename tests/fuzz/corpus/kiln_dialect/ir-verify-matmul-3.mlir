
func.func @matmul_rank4(%a: tensor<1x2x4x8xf32>, %b: tensor<1x2x8x16xf32>) -> tensor<1x2x4x16xf32> {
  %0 = kiln.matmul %a, %b : tensor<1x2x4x8xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x4x16xf32>
  return %0 : tensor<1x2x4x16xf32>
}

