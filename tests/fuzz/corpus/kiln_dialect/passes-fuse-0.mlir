
func.func @chain_into_reduction(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> (tensor<4xf32>, tensor<4x16xf32>) {
  %m = kiln.matmul %a, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %0 = kiln.add %a, %b : tensor<4x8xf32>
  %1 = kiln.exp %0 : tensor<4x8xf32>
  %2 = kiln.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
  return %2, %m : tensor<4xf32>, tensor<4x16xf32>
}

