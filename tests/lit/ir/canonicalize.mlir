// Folders of the kiln ops, driven by -canonicalize.
// RUN: kiln-opt %s -canonicalize -cse -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @reshape_same_type
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x8xf32>)
// CHECK-NOT: kiln.reshape
// CHECK: return %[[A]]
func.func @reshape_same_type(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_reshape
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[R:.*]] = kiln.reshape %[[A]] : tensor<4x8xf32> -> tensor<32xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_reshape(%a: tensor<4x8xf32>) -> tensor<32xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<2x16xf32>
  %1 = kiln.reshape %0 : tensor<2x16xf32> -> tensor<32xf32>
  return %1 : tensor<32xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_roundtrip
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[A]]
func.func @reshape_roundtrip(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<32xf32>
  %1 = kiln.reshape %0 : tensor<32xf32> -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @broadcast_same_type
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[A]]
func.func @broadcast_same_type(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.broadcast %a : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_identity
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[A]]
func.func @transpose_identity(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.transpose %a [0, 1] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_transpose_cancel
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x8xf32>)
// CHECK-NEXT: return %[[A]]
func.func @transpose_transpose_cancel(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = kiln.transpose %a [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %1 = kiln.transpose %0 [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// [2,3,4] -[1,2,0]-> [3,4,2] -[1,2,0]-> [4,2,3] == [2,3,4] -[2,0,1]-> [4,2,3]
// CHECK-LABEL: func.func @transpose_compose
// CHECK-SAME: (%[[A:[^:]+]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[T:.*]] = kiln.transpose %[[A]] [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_compose(%a: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = kiln.transpose %a [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %1 = kiln.transpose %0 [1, 2, 0] : tensor<3x4x2xf32> -> tensor<4x2x3xf32>
  return %1 : tensor<4x2x3xf32>
}

// -----

// CHECK-LABEL: func.func @broadcast_constant
// CHECK-NEXT: %[[C:.*]] = kiln.constant 2.000000e+00 : tensor<4x8xf32>
// CHECK-NEXT: return %[[C]]
func.func @broadcast_constant() -> tensor<4x8xf32> {
  %c = kiln.constant 2.0 : tensor<8xf32>
  %0 = kiln.broadcast %c : tensor<8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_constant
// CHECK-NEXT: %[[C:.*]] = kiln.constant -1.000000e+00 : tensor<2x4xf32>
// CHECK-NEXT: return %[[C]]
func.func @reshape_constant() -> tensor<2x4xf32> {
  %c = kiln.constant -1.0 : tensor<8xf32>
  %0 = kiln.reshape %c : tensor<8xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// CHECK-LABEL: func.func @convert_same_type
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4xf16>)
// CHECK-NEXT: return %[[A]]
func.func @convert_same_type(%a: tensor<4xf16>) -> tensor<4xf16> {
  %0 = kiln.convert %a : tensor<4xf16> -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

// Pure ops: CSE merges duplicates and canonicalize drops dead ones.
// CHECK-LABEL: func.func @cse_and_dce
// CHECK: kiln.exp
// CHECK-NOT: kiln.exp
// CHECK-NOT: kiln.neg
func.func @cse_and_dce(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %a : tensor<4xf32>
  %1 = kiln.exp %a : tensor<4xf32>
  %dead = kiln.neg %a : tensor<4xf32>
  %2 = kiln.add %0, %1 : tensor<4xf32>
  return %2 : tensor<4xf32>
}
