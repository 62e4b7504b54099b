
func.func @constants(%x: tensor<4x4xf32>, %i: tensor<4xi64>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<i64>) {
  %c = kiln.constant 0.5 : tensor<4x4xf32>
  %mm = kiln.matmul %x, %c : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %e = kiln.exp %c : tensor<4x4xf32>
  %s = kiln.reduce_sum %i [0] : tensor<4xi64> -> tensor<i64>
  return %mm, %e, %s : tensor<4x4xf32>, tensor<4x4xf32>, tensor<i64>
}
