// kiln-cpu-hoist-tile-buffers: a row kernel's static tile buffers are
// allocated once, at the entry (codegen/include/kiln/codegen/Passes.td).
// RUN: kiln-opt %s -kiln-cpu-hoist-tile-buffers -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @tile_buffer
// CHECK-NEXT: memref.alloc() : memref<16xf32>
// CHECK: scf.for
// CHECK-NOT: memref.alloc
func.func @tile_buffer(%n: index, %v: f32) attributes {kiln.rows = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %b = memref.alloc() : memref<16xf32>
    linalg.fill ins(%v : f32) outs(%b : memref<16xf32>)
  }
  return
}

// -----

// Not a row kernel: the allocation stays in the loop.
// CHECK-LABEL: func.func @not_rows
// CHECK: scf.for
// CHECK-NEXT: memref.alloc
func.func @not_rows(%n: index, %v: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %n step %c1 {
    %b = memref.alloc() : memref<16xf32>
    linalg.fill ins(%v : f32) outs(%b : memref<16xf32>)
  }
  return
}
