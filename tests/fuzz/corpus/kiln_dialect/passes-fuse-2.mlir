
func.func @constants_cloned(%a: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %zero = kiln.constant 0.0 : tensor<4x8xf32>
  %two = kiln.constant 2.0 : tensor<4x16xf32>
  %0 = kiln.add %a, %zero : tensor<4x8xf32>
  %1 = kiln.relu %0 : tensor<4x8xf32>
  %2 = kiln.matmul %1, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %3 = kiln.mul %2, %two : tensor<4x16xf32>
  return %3, %two : tensor<4x16xf32>, tensor<4x16xf32>
}

