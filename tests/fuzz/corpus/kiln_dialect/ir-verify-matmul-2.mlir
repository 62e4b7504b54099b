
func.func @matmul_rank1(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<1xf32> {
  %0 = kiln.matmul %a, %b : tensor<8xf32>, tensor<8xf32> -> tensor<1xf32>
  return %0 : tensor<1xf32>
}

