
func.func @gelu_tanh_like(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.pow %x, 3.0 : tensor<4x8xf32>
  %1 = kiln.add %x, %0 : tensor<4x8xf32>
  %2 = kiln.tanh %1 : tensor<4x8xf32>
  %3 = kiln.abs %2 : tensor<4x8xf32>
  %4 = kiln.sqrt %3 : tensor<4x8xf32>
  %5 = kiln.sin %4 : tensor<4x8xf32>
  %6 = kiln.cos %5 : tensor<4x8xf32>
  %7 = kiln.rsqrt %6 : tensor<4x8xf32>
  return %7 : tensor<4x8xf32>
}

func.func @batched(%a: tensor<2x4x8xf32>, %b: tensor<2x8x16xf32>) -> tensor<2x4x16xf32> {
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<2x4x16xf32>
  %1 = kiln.tanh %0 : tensor<2x4x16xf32>
  return %1 : tensor<2x4x16xf32>
}
