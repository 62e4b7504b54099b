
func.func @compare_result_shape(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<32xi1> {
  %0 = "kiln.compare"(%a, %b) <{predicate = 2 : i64}> : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<32xi1>
  return %0 : tensor<32xi1>
}

