
func.func @scores(%q: tensor<4x8xf32>, %k: tensor<4x8xf32>, %gamma: tensor<4xf32>)
    -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %kt = kiln.transpose %k [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %s = kiln.matmul %q, %kt : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<4x4xf32>
  %c = kiln.constant 0.125 : tensor<4x4xf32>
  %ss = kiln.mul %s, %c : tensor<4x4xf32>
  %m = kiln.reduce_max %ss [1] : tensor<4x4xf32> -> tensor<4xf32>
  %mr = kiln.reshape %m : tensor<4xf32> -> tensor<4x1xf32>
  %mb = kiln.broadcast %mr : tensor<4x1xf32> -> tensor<4x4xf32>
  %d = kiln.sub %ss, %mb : tensor<4x4xf32>
  %e = kiln.exp %d : tensor<4x4xf32>
  %z = kiln.reduce_sum %e [1] : tensor<4x4xf32> -> tensor<4xf32>
  %zr = kiln.reshape %z : tensor<4xf32> -> tensor<4x1xf32>
  %zb = kiln.broadcast %zr : tensor<4x1xf32> -> tensor<4x4xf32>
  %p = kiln.div %e, %zb : tensor<4x4xf32>
  %sum = kiln.reduce_sum %s [1] : tensor<4x4xf32> -> tensor<4xf32>
  %quarter = kiln.constant 0.25 : tensor<4xf32>
  %mean = kiln.mul %sum, %quarter : tensor<4xf32>
  %meanr = kiln.reshape %mean : tensor<4xf32> -> tensor<4x1xf32>
  %meanb = kiln.broadcast %meanr : tensor<4x1xf32> -> tensor<4x4xf32>
  %xc = kiln.sub %s, %meanb : tensor<4x4xf32>
  %sq = kiln.pow %xc, 2.0 : tensor<4x4xf32>
  %vsum = kiln.reduce_sum %sq [1] : tensor<4x4xf32> -> tensor<4xf32>
  %var = kiln.mul %vsum, %quarter : tensor<4xf32>
  %eps = kiln.constant 1.0e-05 : tensor<4xf32>
  %ve = kiln.add %var, %eps : tensor<4xf32>
  %r = kiln.rsqrt %ve : tensor<4xf32>
  %rr = kiln.reshape %r : tensor<4xf32> -> tensor<4x1xf32>
  %rb = kiln.broadcast %rr : tensor<4x1xf32> -> tensor<4x4xf32>
  %y = kiln.mul %xc, %rb : tensor<4x4xf32>
  %gb = kiln.broadcast %gamma : tensor<4xf32> -> tensor<4x4xf32>
  %o = kiln.mul %y, %gb : tensor<4x4xf32>
  return %p, %o : tensor<4x4xf32>, tensor<4x4xf32>
}
