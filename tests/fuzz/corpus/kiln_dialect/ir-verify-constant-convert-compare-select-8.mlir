
func.func @convert_f64(%a: tensor<4xf32>) -> tensor<4xf64> {
  %0 = kiln.convert %a : tensor<4xf32> -> tensor<4xf64>
  return %0 : tensor<4xf64>
}

