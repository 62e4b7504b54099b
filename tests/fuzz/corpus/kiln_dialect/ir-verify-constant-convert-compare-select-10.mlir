
func.func @compare_operand_types(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xi1> {
  %0 = "kiln.compare"(%a, %b) <{predicate = 2 : i64}> : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

