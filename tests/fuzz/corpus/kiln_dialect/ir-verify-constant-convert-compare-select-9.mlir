
func.func @convert_i32(%a: tensor<4xi32>) -> tensor<4xf32> {
  %0 = kiln.convert %a : tensor<4xi32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

