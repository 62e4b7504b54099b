
func.func @constant_dynamic() -> tensor<?xf32> {
  %0 = kiln.constant 0.0 : tensor<?xf32>
  return %0 : tensor<?xf32>
}

