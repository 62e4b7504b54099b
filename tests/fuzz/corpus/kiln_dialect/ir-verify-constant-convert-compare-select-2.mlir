
func.func @constant_int() -> tensor<2xi64> {
  %0 = kiln.constant 1.5 : tensor<2xi64>
  return %0 : tensor<2xi64>
}

