
func.func @add_bool(%a: tensor<4xi1>, %b: tensor<4xi1>) -> tensor<4xi1> {
  %0 = kiln.add %a, %b : tensor<4xi1>
  return %0 : tensor<4xi1>
}

