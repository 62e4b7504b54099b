
func.func @exp_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  %0 = kiln.exp %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

