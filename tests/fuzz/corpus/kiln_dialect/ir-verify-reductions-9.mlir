
func.func @reduce_sum_bool(%a: tensor<4x8xi1>) -> tensor<4xi1> {
  %0 = kiln.reduce_sum %a [1] : tensor<4x8xi1> -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

