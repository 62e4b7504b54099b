
func.func @constant_bool_negative() -> tensor<2xi1> {
  %0 = kiln.constant -1.0 : tensor<2xi1>
  return %0 : tensor<2xi1>
}

