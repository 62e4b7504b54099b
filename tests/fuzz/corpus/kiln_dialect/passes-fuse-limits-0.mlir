
func.func @capped_chain(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %a : tensor<4xf32>
  %1 = kiln.neg %0 : tensor<4xf32>
  %2 = kiln.relu %1 : tensor<4xf32>
  %3 = kiln.log %2 : tensor<4xf32>
  return %3 : tensor<4xf32>
}
