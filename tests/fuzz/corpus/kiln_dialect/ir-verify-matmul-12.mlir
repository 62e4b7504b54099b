
func.func @matmul_bool(%a: tensor<4x8xi1>, %b: tensor<8x16xi1>) -> tensor<4x16xi1> {
  %0 = kiln.matmul %a, %b : tensor<4x8xi1>, tensor<8x16xi1> -> tensor<4x16xi1>
  return %0 : tensor<4x16xi1>
}

