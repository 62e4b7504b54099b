
func.func @fusion_arg_count(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
    %c = kiln.constant 1.0 : tensor<4x8xf32>
    kiln.yield %c : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

