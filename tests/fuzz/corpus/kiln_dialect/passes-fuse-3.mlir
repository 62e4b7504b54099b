
func.func @forward(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @backward(%a: tensor<4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = kiln.neg %w : tensor<4x4xf32>
  %1 = kiln.matmul %0, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %2 = kiln.exp %1 : tensor<4x4xf32>
  return %2 : tensor<4x4xf32>
}
