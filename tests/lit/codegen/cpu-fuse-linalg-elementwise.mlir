// kiln-cpu-fuse-linalg-elementwise: linalg producers with one data use are
// fused into their consumer (codegen/include/kiln/codegen/Passes.td).
// RUN: kiln-opt %s -kiln-cpu-fuse-linalg-elementwise -split-input-file | FileCheck %s

#id = affine_map<(d0) -> (d0)>

// add then exp: the add has one use, so one generic computes exp(a + b).
// CHECK-LABEL: func.func @chain
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK-NEXT: math.exp
// CHECK-NOT: linalg.generic
func.func @chain(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> {
  %e0 = tensor.empty() : tensor<8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<8xf32>, tensor<8xf32>) outs(%e0 : tensor<8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %s = arith.addf %x, %y : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %1 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%0 : tensor<8xf32>) outs(%e1 : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %1 : tensor<8xf32>
}

// -----

#id = affine_map<(d0) -> (d0)>

// The exp is read by two ops (and returned): linalg's fusion keeps it as
// its own generic (kiln-cpu-merge-generics merges such kernels).
// CHECK-LABEL: func.func @two_uses
// CHECK: math.exp
// CHECK: linalg.generic
// CHECK: arith.negf
func.func @two_uses(%a: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
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
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}
