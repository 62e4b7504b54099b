
func.func @share_input(%a: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = kiln.exp %a : tensor<4x8xf32>
  %1 = kiln.neg %a : tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

