
func.func @constant_int_nan() -> tensor<2xi64> {
  %0 = kiln.constant 0x7FF8000000000000 : tensor<2xi64>
  return %0 : tensor<2xi64>
}

