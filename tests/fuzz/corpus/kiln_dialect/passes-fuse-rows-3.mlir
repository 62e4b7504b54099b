
func.func @column_reduction(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = kiln.reduce_sum %a [0] : tensor<4x8xf32> -> tensor<8xf32>
  %sb = kiln.broadcast %s : tensor<8xf32> -> tensor<4x8xf32>
  %0 = kiln.sub %a, %sb : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
