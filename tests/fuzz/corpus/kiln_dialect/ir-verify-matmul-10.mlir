
func.func @matmul_operand_elements(%a: tensor<4x8xbf16>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %0 = kiln.matmul %a, %b : tensor<4x8xbf16>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

