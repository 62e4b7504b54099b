
func.func @cse_and_dce(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %a : tensor<4xf32>
  %1 = kiln.exp %a : tensor<4xf32>
  %dead = kiln.neg %a : tensor<4xf32>
  %2 = kiln.add %0, %1 : tensor<4xf32>
  return %2 : tensor<4xf32>
}
