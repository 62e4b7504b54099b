
func.func @neg_result_mismatch(%a: tensor<4xf32>) -> tensor<2x2xf32> {
  %0 = "kiln.neg"(%a) : (tensor<4xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

