
func.func @matmul_result_batch(%a: tensor<2x4x8xf32>, %b: tensor<2x8x16xf32>) -> tensor<1x4x16xf32> {
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<1x4x16xf32>
  return %0 : tensor<1x4x16xf32>
}

