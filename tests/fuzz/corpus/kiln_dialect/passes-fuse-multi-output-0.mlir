
func.func @returned_and_consumed(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kiln.exp %a : tensor<4xf32>
  %1 = kiln.neg %0 : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

