
func.func @neg_bool(%a: tensor<4xi1>) -> tensor<4xi1> {
  %0 = kiln.neg %a : tensor<4xi1>
  return %0 : tensor<4xi1>
}

