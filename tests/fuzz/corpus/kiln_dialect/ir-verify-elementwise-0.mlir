
func.func @add_shape_mismatch(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>) -> tensor<4x8xf32> {
  %0 = "kiln.add"(%a, %b) : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

