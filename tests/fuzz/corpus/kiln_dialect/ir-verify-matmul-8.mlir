
func.func @matmul_result_m(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

