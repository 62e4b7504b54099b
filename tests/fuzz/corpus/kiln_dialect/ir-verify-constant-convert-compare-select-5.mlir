
func.func @constant_f64() -> tensor<2xf64> {
  %0 = kiln.constant 0.0 : tensor<2xf64>
  return %0 : tensor<2xf64>
}

