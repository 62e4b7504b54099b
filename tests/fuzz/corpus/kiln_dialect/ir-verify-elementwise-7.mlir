
func.func @neg_dynamic(%a: tensor<?xf32>) -> tensor<?xf32> {
  %0 = kiln.neg %a : tensor<?xf32>
  return %0 : tensor<?xf32>
}

