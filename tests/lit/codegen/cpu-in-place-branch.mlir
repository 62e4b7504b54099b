// kiln-cpu-in-place-branch: a kernel tagged kiln.in_place gets a branch on
// equal addresses of its pairs (codegen/include/kiln/codegen/Passes.td).
// RUN: kiln-opt %s -kiln-cpu-in-place-branch | FileCheck %s

#id = affine_map<(d0) -> (d0)>

// One elementwise loop: the then-branch reads the operand through the
// result pointer (a cast of %r, no copy); the else-branch is the body as
// it was; the tag is gone.
// CHECK-LABEL: func.func @neg
// CHECK-SAME: (%[[A:.*]]: memref<8xf32>, %[[R:.*]]: memref<8xf32>)
// CHECK-NOT: kiln.in_place
// CHECK-DAG: %[[PA:.*]] = memref.extract_aligned_pointer_as_index %[[A]]
// CHECK-DAG: %[[PR:.*]] = memref.extract_aligned_pointer_as_index %[[R]]
// CHECK: %[[SAME:.*]] = arith.cmpi eq, %[[PA]], %[[PR]]
// CHECK: scf.if %[[SAME]] {
// CHECK: %[[THROUGH:.*]] = memref.cast %[[R]]
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic {{.*}} ins(%[[THROUGH]] : memref<8xf32>) outs(%[[R]] : memref<8xf32>)
// CHECK: } else {
// CHECK: linalg.generic {{.*}} ins(%[[A]] : memref<8xf32>) outs(%[[R]] : memref<8xf32>)
func.func @neg(%a: memref<8xf32>, %r: memref<8xf32>) attributes {kiln.in_place = array<i64: 0, 1>} {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : memref<8xf32>) outs(%r : memref<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  }
  return
}
