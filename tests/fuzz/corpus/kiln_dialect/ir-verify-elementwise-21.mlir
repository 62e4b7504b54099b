
func.func @pow_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  %0 = kiln.pow %a, 2.0 : tensor<4xi64>
  return %0 : tensor<4xi64>
}

