
func.func @reshape_to_scalar(%a: tensor<2xf32>) -> tensor<f32> {
  %0 = kiln.reshape %a : tensor<2xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

