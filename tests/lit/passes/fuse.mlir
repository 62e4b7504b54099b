// kiln-fuse: grouping rules (see passes/DESIGN.md), without row fusion
// (rows=false; fuse-rows.mlir covers it).
// RUN: kiln-opt %s -kiln-fuse="rows=false" -split-input-file | FileCheck %s

// An elementwise chain feeding a reduction becomes ONE fusion; the matmul
// stays outside.
// CHECK-LABEL: func.func @chain_into_reduction
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x8xf32>, %[[B:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<8x16xf32>)
// CHECK: %[[M:.*]] = kiln.matmul %[[A]], %[[W]]
// CHECK: %[[F:.*]] = kiln.fusion "fusion_0"(%[[A]], %[[B]]) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4xf32> {
// CHECK: kiln.add
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.reduce_sum
// CHECK-NEXT: kiln.yield
// CHECK-NEXT: }
// CHECK-NOT: kiln.fusion
// CHECK: return %[[F]], %[[M]]
func.func @chain_into_reduction(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> (tensor<4xf32>, tensor<4x16xf32>) {
  %m = kiln.matmul %a, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %0 = kiln.add %a, %b : tensor<4x8xf32>
  %1 = kiln.exp %0 : tensor<4x8xf32>
  %2 = kiln.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
  return %2, %m : tensor<4xf32>, tensor<4x16xf32>
}

// -----

// A producer of another shape (behind a broadcast view) starts its own
// group; the two groups share %a but merging them would close a cycle
// through the broadcast (see fuse-siblings.mlir).
// CHECK-LABEL: func.func @shape_boundary
// CHECK: kiln.fusion "fusion_0"
// CHECK: kiln.reduce_max
// CHECK: kiln.broadcast
// CHECK: kiln.fusion "fusion_1"
// CHECK-NOT: kiln.reduce_max
// CHECK: kiln.sub
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.yield
func.func @shape_boundary(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  %1 = kiln.reshape %0 : tensor<4xf32> -> tensor<4x1xf32>
  %2 = kiln.broadcast %1 : tensor<4x1xf32> -> tensor<4x8xf32>
  %3 = kiln.sub %a, %2 : tensor<4x8xf32>
  %4 = kiln.exp %3 : tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// A splat constant is cloned into every fusion that uses it (it is not an
// operand); a constant used outside fusions gets its own fusion.
// CHECK-LABEL: func.func @constants_cloned
// CHECK: %[[C:.*]] = kiln.fusion "fusion_0"() : () -> tensor<4x16xf32> {
// CHECK-NEXT: kiln.constant 2.000000e+00 : tensor<4x16xf32>
// CHECK-NEXT: kiln.yield
// CHECK: kiln.fusion "fusion_1"(%{{.*}}) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK: kiln.constant 0.000000e+00 : tensor<4x8xf32>
// CHECK: kiln.relu
// CHECK: kiln.matmul
// CHECK: kiln.fusion "fusion_2"(%{{.*}}) : (tensor<4x16xf32>) -> tensor<4x16xf32> {
// CHECK: kiln.constant 2.000000e+00 : tensor<4x16xf32>
// CHECK: kiln.mul
// CHECK: return %{{.*}}, %[[C]]
func.func @constants_cloned(%a: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %zero = kiln.constant 0.0 : tensor<4x8xf32>
  %two = kiln.constant 2.0 : tensor<4x16xf32>
  %0 = kiln.add %a, %zero : tensor<4x8xf32>
  %1 = kiln.relu %0 : tensor<4x8xf32>
  %2 = kiln.matmul %1, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %3 = kiln.mul %2, %two : tensor<4x16xf32>
  return %3, %two : tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// Kernel names are unique across the module, in order of appearance.
// CHECK-LABEL: func.func @forward
// CHECK: kiln.fusion "fusion_0"
// CHECK-LABEL: func.func @backward
// CHECK: kiln.fusion "fusion_1"
// CHECK: kiln.fusion "fusion_2"
func.func @forward(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}
func.func @backward(%a: tensor<4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = kiln.neg %w : tensor<4x4xf32>
  %1 = kiln.matmul %0, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %2 = kiln.exp %1 : tensor<4x4xf32>
  return %2 : tensor<4x4xf32>
}
