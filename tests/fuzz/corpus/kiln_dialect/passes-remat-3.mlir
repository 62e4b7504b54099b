
func.func @joint(%x: tensor<4x2xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4x2xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %e = kiln.exp %x : tensor<4x2xf32>
  %s = kiln.reduce_sum %e [1] : tensor<4x2xf32> -> tensor<4xf32>
  %l = kiln.log %s : tensor<4xf32>
  %r = kiln.div %g, %s : tensor<4xf32>
  %r1 = kiln.reshape %r : tensor<4xf32> -> tensor<4x1xf32>
  %rb = kiln.broadcast %r1 : tensor<4x1xf32> -> tensor<4x2xf32>
  %gx = kiln.mul %e, %rb : tensor<4x2xf32>
  return %l, %gx : tensor<4xf32>, tensor<4x2xf32>
}

