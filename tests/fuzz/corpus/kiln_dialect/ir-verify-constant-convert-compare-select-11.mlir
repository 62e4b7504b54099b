
func.func @compare_operand_shapes(%a: tensor<4xf32>, %b: tensor<1xf32>) -> tensor<4xi1> {
  %0 = "kiln.compare"(%a, %b) <{predicate = 0 : i64}> : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

