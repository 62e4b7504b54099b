
func.func @pow_result_mismatch(%a: tensor<4xf32>) -> tensor<4xf16> {
  %0 = "kiln.pow"(%a) <{exponent = 2.0 : f64}> : (tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

