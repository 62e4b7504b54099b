
func.func @add_f64(%a: tensor<4xf64>, %b: tensor<4xf64>) -> tensor<4xf64> {
  %0 = kiln.add %a, %b : tensor<4xf64>
  return %0 : tensor<4xf64>
}

