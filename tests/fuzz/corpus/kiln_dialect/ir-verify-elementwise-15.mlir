
func.func @sqrt_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  %0 = kiln.sqrt %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

