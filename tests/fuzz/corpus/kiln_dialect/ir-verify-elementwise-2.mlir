
func.func @mul_element_mismatch(%a: tensor<4xf32>, %b: tensor<4xbf16>) -> tensor<4xf32> {
  %0 = "kiln.mul"(%a, %b) : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

