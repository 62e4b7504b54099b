// kiln-cpu-tile-rows: a row kernel (kiln.rows) becomes one loop over row
// tiles with its producers fused in (codegen/include/kiln/codegen/Passes.td).
// RUN: kiln-opt %s -kiln-cpu-tile-rows -split-input-file | FileCheck %s

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>

// Rows of 32 f32 are 128 B; the largest divisor of 256 rows whose tile is
// at most 8 KiB is 64 rows: a loop of step 64 whose body holds the fill
// and the reduction.
// CHECK-LABEL: func.func @row_sum
// CHECK: %[[C64:.*]] = arith.constant 64 : index
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C64]]
// CHECK: linalg.fill
// CHECK: linalg.generic
// CHECK-SAME: "reduction"
func.func @row_sum(%a: tensor<256x32xf32>) -> tensor<256xf32> attributes {kiln.rows = 1 : i64} {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<256xf32>) -> tensor<256xf32>
  %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%a : tensor<256x32xf32>) outs(%f : tensor<256xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %y = arith.addf %x, %acc : f32
    linalg.yield %y : f32
  } -> tensor<256xf32>
  return %s : tensor<256xf32>
}

// -----

#id = affine_map<(d0) -> (d0)>

// Not a row kernel: unchanged.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: scf.for
func.func @plain(%a: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %0 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = math.exp %x : f32
    linalg.yield %s : f32
  } -> tensor<8xf32>
  return %0 : tensor<8xf32>
}
