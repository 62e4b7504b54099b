
func.func @mul_i32(%a: tensor<4xi32>, %b: tensor<4xi32>) -> tensor<4xi32> {
  %0 = kiln.mul %a, %b : tensor<4xi32>
  return %0 : tensor<4xi32>
}

