
func.func @sub_rank_mismatch(%a: tensor<4x8xf32>, %b: tensor<32xf32>) -> tensor<4x8xf32> {
  %0 = "kiln.sub"(%a, %b) : (tensor<4x8xf32>, tensor<32xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

