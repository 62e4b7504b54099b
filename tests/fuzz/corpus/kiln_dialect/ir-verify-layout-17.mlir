
func.func @reshape_f64(%a: tensor<4x8xf64>) -> tensor<32xf64> {
  %0 = kiln.reshape %a : tensor<4x8xf64> -> tensor<32xf64>
  return %0 : tensor<32xf64>
}
