
func.func @reduce_wrong_dim_kept(%a: tensor<4x8xf32>) -> tensor<8xf32> {
  %0 = kiln.reduce_sum %a [1] : tensor<4x8xf32> -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

