
func.func @exp_result_mismatch(%a: tensor<4xf32>) -> tensor<4xbf16> {
  %0 = "kiln.exp"(%a) : (tensor<4xf32>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

