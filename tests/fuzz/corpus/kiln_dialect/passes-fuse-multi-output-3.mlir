
func.func @sorted_near_original_order(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>, %u: tensor<4x4xf32>)
    -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) {
  %e = kiln.exp %x : tensor<4x4xf32>
  %m = kiln.matmul %e, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %n = kiln.neg %x : tensor<4x4xf32>
  %t = kiln.transpose %u [1, 0] : tensor<4x4xf32> -> tensor<4x4xf32>
  %m2 = kiln.matmul %u, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %m, %n, %t, %m2 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}
