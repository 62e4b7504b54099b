
func.func @div_result_mismatch(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf16> {
  %0 = "kiln.div"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

