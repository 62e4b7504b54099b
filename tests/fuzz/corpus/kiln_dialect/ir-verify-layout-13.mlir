
func.func @broadcast_dynamic_result(%a: tensor<8xf32>) -> tensor<?x8xf32> {
  %0 = kiln.broadcast %a : tensor<8xf32> -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

