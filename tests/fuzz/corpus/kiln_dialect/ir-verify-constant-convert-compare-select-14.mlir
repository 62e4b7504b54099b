
func.func @compare_bad_predicate(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xi1> {
  %0 = kiln.compare ult, %a, %b : tensor<4xf32>
  return %0 : tensor<4xi1>
}

