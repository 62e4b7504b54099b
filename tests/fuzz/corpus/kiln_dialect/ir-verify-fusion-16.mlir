
func.func @fusion_kernel_not_string(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = "kiln.fusion"(%a) <{kernel = 0 : i64}> ({
  ^bb0(%x: tensor<4xf32>):
    "kiln.yield"(%x) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

