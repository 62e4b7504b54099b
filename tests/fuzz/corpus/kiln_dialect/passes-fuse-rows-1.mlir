
func.func @layer_norm(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>) {
  %inv_n = kiln.constant 0.125 : tensor<2x3x1xf32>
  %eps = kiln.constant 1.0e-05 : tensor<2x3x1xf32>
  %s = kiln.reduce_sum %x [2] : tensor<2x3x8xf32> -> tensor<2x3xf32>
  %sr = kiln.reshape %s : tensor<2x3xf32> -> tensor<2x3x1xf32>
  %mean = kiln.mul %sr, %inv_n : tensor<2x3x1xf32>
  %mb = kiln.broadcast %mean : tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %d = kiln.sub %x, %mb : tensor<2x3x8xf32>
  %sq = kiln.mul %d, %d : tensor<2x3x8xf32>
  %v = kiln.reduce_sum %sq [2] : tensor<2x3x8xf32> -> tensor<2x3xf32>
  %vr = kiln.reshape %v : tensor<2x3xf32> -> tensor<2x3x1xf32>
  %var = kiln.mul %vr, %inv_n : tensor<2x3x1xf32>
  %ve = kiln.add %var, %eps : tensor<2x3x1xf32>
  %r = kiln.rsqrt %ve : tensor<2x3x1xf32>
  %rb = kiln.broadcast %r : tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %n = kiln.mul %d, %rb : tensor<2x3x8xf32>
  %wb = kiln.broadcast %w : tensor<8xf32> -> tensor<2x3x8xf32>
  %y = kiln.mul %n, %wb : tensor<2x3x8xf32>
  return %y, %mean : tensor<2x3x8xf32>, tensor<2x3x1xf32>
}

