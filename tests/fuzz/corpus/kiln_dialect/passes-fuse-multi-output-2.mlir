
func.func @cycle_rejected(%a: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = kiln.exp %a : tensor<4x4xf32>
  %m = kiln.matmul %0, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %1 = kiln.add %0, %m : tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}

