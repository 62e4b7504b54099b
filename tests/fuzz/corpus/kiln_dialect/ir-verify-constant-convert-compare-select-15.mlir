
func.func @compare_predicate_out_of_range(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xi1> {
  %0 = "kiln.compare"(%a, %b) <{predicate = 6 : i64}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

