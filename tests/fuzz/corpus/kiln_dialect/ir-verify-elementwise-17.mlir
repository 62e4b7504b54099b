
func.func @tanh_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  %0 = kiln.tanh %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

