
func.func @pow_exponent_f32(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "kiln.pow"(%a) <{exponent = 2.0 : f32}> : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
