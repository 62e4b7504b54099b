// kiln-cpu-merge-generics: elementwise generics over one iteration space
// become one multi-result generic (codegen/include/kiln/codegen/Passes.td).
// RUN: kiln-opt %s -kiln-cpu-merge-generics -split-input-file | FileCheck %s

#id = affine_map<(d0) -> (d0)>

// e = exp(a) is returned and read by -e and by e * -e: one generic yields
// e and e * -e, each element's chain computed once.
// CHECK-LABEL: func.func @shared_value
// CHECK: %[[M:.*]]:2 = linalg.generic
// CHECK: math.exp
// CHECK: arith.negf
// CHECK: arith.mulf
// CHECK-NOT: linalg.generic
// CHECK: return %[[M]]#0, %[[M]]#1
func.func @shared_value(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e0 = tensor.empty() : tensor<8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<8xf32>) outs(%e0 : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%0 : tensor<8xf32>) outs(%e1 : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.negf %x : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8xf32>
  %2 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%0, %1 : tensor<8xf32>, tensor<8xf32>) outs(%e2 : tensor<8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.mulf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %0, %2 : tensor<8xf32>, tensor<8xf32>
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// A reduction is not elementwise: nothing changes.
// CHECK-LABEL: func.func @with_reduction
// CHECK: linalg.generic
// CHECK: linalg.generic
// CHECK-SAME: "reduction"
func.func @with_reduction(%a: tensor<4x8xf32>, %init: tensor<4xf32>) -> tensor<4xf32> {
  %e0 = tensor.empty() : tensor<4x8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<4x8xf32>) outs(%e0 : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %1 = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%0 : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %s = arith.addf %x, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %1 : tensor<4xf32>
}
