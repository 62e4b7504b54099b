
func.func @select_branch_types(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xbf16>) -> tensor<4xf32> {
  %0 = "kiln.select"(%c, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

