
func.func @relu_backward(%z: tensor<4x8xf32>, %gy: tensor<4x8xf32>, %w: tensor<8x3xf32>) -> (tensor<4x3xf32>, tensor<8xf32>) {
  %zero = kiln.constant 0.0 : tensor<4x8xf32>
  %mask = kiln.compare gt, %z, %zero : tensor<4x8xf32>
  %gz = kiln.select %mask, %gy, %zero : tensor<4x8xf32>
  %gx = kiln.matmul %gz, %w : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
  %gb = kiln.reduce_sum %gz [0] : tensor<4x8xf32> -> tensor<8xf32>
  return %gx, %gb : tensor<4x3xf32>, tensor<8xf32>
}

