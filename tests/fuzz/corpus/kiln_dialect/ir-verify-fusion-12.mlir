
func.func @fusion_matmul(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%x: tensor<4x4xf32>):
    %m = kiln.matmul %x, %x : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
    kiln.yield %m : tensor<4x4xf32>
  }
  return %r : tensor<4x4xf32>
}

