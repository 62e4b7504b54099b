
func.func @convert_rank(%a: tensor<4x8xf32>) -> tensor<32xf32> {
  %0 = kiln.convert %a : tensor<4x8xf32> -> tensor<32xf32>
  return %0 : tensor<32xf32>
}

