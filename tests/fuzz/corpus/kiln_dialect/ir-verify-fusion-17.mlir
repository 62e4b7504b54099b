
func.func @yield_outside(%a: tensor<4xf32>) {
  kiln.yield %a : tensor<4xf32>
}

