
func.func @compare_result_not_bool(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "kiln.compare"(%a, %b) <{predicate = 2 : i64}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

