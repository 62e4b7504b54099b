
func.func @dependent_siblings(%a: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = kiln.exp %a : tensor<4x4xf32>
  %m = kiln.matmul %0, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %1 = kiln.sub %a, %m : tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}
