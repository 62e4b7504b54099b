// kiln-cpu-collapse-reductions: a full reduction over a contiguous tensor is
// one loop over its elements (codegen/include/kiln/codegen/Passes.td).
// RUN: kiln-opt %s -kiln-cpu-collapse-reductions -split-input-file | FileCheck %s

#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>

// CHECK-LABEL: func.func @contiguous_argument
// CHECK: tensor.collapse_shape %{{.*}} {{\[\[}}0, 1, 2, 3]] : tensor<5x2x3x4xf32> into tensor<120xf32>
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction"]
func.func @contiguous_argument(%m: memref<5x2x3x4xf32, strided<[24, 12, 4, 1], offset: ?>>, %out: memref<f32>) {
  %x = bufferization.to_tensor %m restrict : memref<5x2x3x4xf32, strided<[24, 12, 4, 1], offset: ?>>
  %e = tensor.empty() : tensor<f32>
  %zero = arith.constant 0.0 : f32
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [#id, #scalar], iterator_types = ["reduction", "reduction", "reduction", "reduction"]}
      ins(%x : tensor<5x2x3x4xf32>) outs(%init : tensor<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %a = arith.addf %in, %acc fastmath<reassoc> : f32
    linalg.yield %a : f32
  } -> tensor<f32>
  bufferization.materialize_in_destination %s in restrict writable %out : (tensor<f32>, memref<f32>) -> ()
  return
}

// -----

#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#scalar = affine_map<(d0, d1, d2, d3) -> ()>

// A transposed argument (strides not row-major) keeps its loop nest: a
// collapse would copy it first.
// CHECK-LABEL: func.func @strided_argument
// CHECK-NOT: tensor.collapse_shape
// CHECK: iterator_types = ["reduction", "reduction", "reduction", "reduction"]
func.func @strided_argument(%m: memref<3x2x3x5xf32, strided<[1, 9, 3, 18], offset: ?>>, %out: memref<f32>) {
  %x = bufferization.to_tensor %m restrict : memref<3x2x3x5xf32, strided<[1, 9, 3, 18], offset: ?>>
  %e = tensor.empty() : tensor<f32>
  %zero = arith.constant 0.0 : f32
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %s = linalg.generic {indexing_maps = [#id, #scalar], iterator_types = ["reduction", "reduction", "reduction", "reduction"]}
      ins(%x : tensor<3x2x3x5xf32>) outs(%init : tensor<f32>) {
  ^bb0(%in: f32, %acc: f32):
    %a = arith.addf %in, %acc fastmath<reassoc> : f32
    linalg.yield %a : f32
  } -> tensor<f32>
  bufferization.materialize_in_destination %s in restrict writable %out : (tensor<f32>, memref<f32>) -> ()
  return
}

// -----

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// A partial reduction (one result per row) is not a full reduction.
// CHECK-LABEL: func.func @row_sum
// CHECK-NOT: tensor.collapse_shape
func.func @row_sum(%x: tensor<4x8xf32>, %init: tensor<4xf32>) -> tensor<4xf32> {
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %a = arith.addf %in, %acc fastmath<reassoc> : f32
    linalg.yield %a : f32
  } -> tensor<4xf32>
  return %s : tensor<4xf32>
}
