
func.func @matmul_batched_k(%a: tensor<2x4x8xf32>, %b: tensor<2x7x16xf32>) -> tensor<2x4x16xf32> {
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x7x16xf32> -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

