
func.func @matmul_result_n(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x15xf32> {
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x15xf32>
  return %0 : tensor<4x15xf32>
}

