// Round trip of every kiln op: print, parse the output again, check it.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @constant
func.func @constant() -> (tensor<4x8xf32>, tensor<3xi64>, tensor<2xi1>, tensor<2xbf16>) {
  // CHECK: kiln.constant 0.000000e+00 : tensor<4x8xf32>
  %0 = kiln.constant 0.0 : tensor<4x8xf32>
  // CHECK: kiln.constant 3.000000e+00 : tensor<3xi64>
  %1 = kiln.constant 3.0 : tensor<3xi64>
  // CHECK: kiln.constant 1.000000e+00 : tensor<2xi1>
  %2 = kiln.constant 1.0 : tensor<2xi1>
  // CHECK: kiln.constant -2.500000e-01 : tensor<2xbf16>
  %3 = kiln.constant -0.25 : tensor<2xbf16>
  return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<3xi64>, tensor<2xi1>, tensor<2xbf16>
}

// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: kiln.add %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %0 = kiln.add %a, %b : tensor<4x8xf32>
  // CHECK: kiln.sub
  %1 = kiln.sub %0, %b : tensor<4x8xf32>
  // CHECK: kiln.mul
  %2 = kiln.mul %1, %b : tensor<4x8xf32>
  // CHECK: kiln.div
  %3 = kiln.div %2, %b : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @unary
func.func @unary(%a: tensor<4x8xf16>, %i: tensor<3xi64>) -> (tensor<4x8xf16>, tensor<3xi64>) {
  // CHECK: kiln.neg %{{.*}} : tensor<4x8xf16>
  %0 = kiln.neg %a : tensor<4x8xf16>
  // CHECK: kiln.exp
  %1 = kiln.exp %0 : tensor<4x8xf16>
  // CHECK: kiln.log
  %2 = kiln.log %1 : tensor<4x8xf16>
  // CHECK: kiln.relu
  %3 = kiln.relu %2 : tensor<4x8xf16>
  // CHECK: kiln.neg %{{.*}} : tensor<3xi64>
  %4 = kiln.neg %i : tensor<3xi64>
  return %3, %4 : tensor<4x8xf16>, tensor<3xi64>
}

// CHECK-LABEL: func.func @compare_select_convert
func.func @compare_select_convert(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xbf16> {
  // CHECK: %[[C:.*]] = kiln.compare lt, %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %c = kiln.compare lt, %a, %b : tensor<4x8xf32>
  // CHECK: kiln.compare ge
  %d = kiln.compare ge, %a, %b : tensor<4x8xf32>
  // CHECK: %[[S:.*]] = kiln.select %[[C]], %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %s = kiln.select %c, %a, %b : tensor<4x8xf32>
  // CHECK: kiln.convert %[[S]] : tensor<4x8xf32> -> tensor<4x8xbf16>
  %t = kiln.convert %s : tensor<4x8xf32> -> tensor<4x8xbf16>
  return %t : tensor<4x8xbf16>
}

// CHECK-LABEL: func.func @matmul
func.func @matmul(%a: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // CHECK: kiln.matmul %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %0 = kiln.matmul %a, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// CHECK-LABEL: func.func @math_unary
func.func @math_unary(%a: tensor<4x8xf32>, %i: tensor<3xi64>, %h: tensor<2xbf16>) -> (tensor<4x8xf32>, tensor<3xi64>, tensor<2xbf16>) {
  // CHECK: %[[S:.*]] = kiln.sqrt %{{.*}} : tensor<4x8xf32>
  %0 = kiln.sqrt %a : tensor<4x8xf32>
  // CHECK: %[[R:.*]] = kiln.rsqrt %[[S]] : tensor<4x8xf32>
  %1 = kiln.rsqrt %0 : tensor<4x8xf32>
  // CHECK: %[[T:.*]] = kiln.tanh %[[R]] : tensor<4x8xf32>
  %2 = kiln.tanh %1 : tensor<4x8xf32>
  // CHECK: %[[A:.*]] = kiln.abs %[[T]] : tensor<4x8xf32>
  %3 = kiln.abs %2 : tensor<4x8xf32>
  // CHECK: %[[SN:.*]] = kiln.sin %[[A]] : tensor<4x8xf32>
  %4 = kiln.sin %3 : tensor<4x8xf32>
  // CHECK: %[[C:.*]] = kiln.cos %[[SN]] : tensor<4x8xf32>
  %5 = kiln.cos %4 : tensor<4x8xf32>
  // CHECK: kiln.pow %[[C]], 3.000000e+00 : tensor<4x8xf32>
  %6 = kiln.pow %5, 3.0 : tensor<4x8xf32>
  // CHECK: kiln.abs %{{.*}} : tensor<3xi64>
  %7 = kiln.abs %i : tensor<3xi64>
  // CHECK: kiln.pow %{{.*}}, -5.000000e-01 : tensor<2xbf16>
  %8 = kiln.pow %h, -0.5 : tensor<2xbf16>
  return %6, %7, %8 : tensor<4x8xf32>, tensor<3xi64>, tensor<2xbf16>
}

// CHECK-LABEL: func.func @batched_matmul
func.func @batched_matmul(%a: tensor<2x4x8xf32>, %b: tensor<2x8x16xf32>) -> tensor<2x4x16xf32> {
  // CHECK: kiln.matmul %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<2x4x16xf32>
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// CHECK-LABEL: func.func @layout
func.func @layout(%a: tensor<4x8xf32>, %v: tensor<8xf32>) -> (tensor<8x4xf32>, tensor<3x4x8xf32>, tensor<32xf32>) {
  // CHECK: kiln.transpose %{{.*}} [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %0 = kiln.transpose %a [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  // CHECK: kiln.broadcast %{{.*}} : tensor<8xf32> -> tensor<3x4x8xf32>
  %1 = kiln.broadcast %v : tensor<8xf32> -> tensor<3x4x8xf32>
  // CHECK: kiln.reshape %{{.*}} : tensor<4x8xf32> -> tensor<32xf32>
  %2 = kiln.reshape %a : tensor<4x8xf32> -> tensor<32xf32>
  return %0, %1, %2 : tensor<8x4xf32>, tensor<3x4x8xf32>, tensor<32xf32>
}

// CHECK-LABEL: func.func @reduce
func.func @reduce(%a: tensor<2x4x8xf32>) -> (tensor<4xf32>, tensor<2x4xf32>) {
  // CHECK: kiln.reduce_sum %{{.*}} [0, 2] : tensor<2x4x8xf32> -> tensor<4xf32>
  %0 = kiln.reduce_sum %a [0, 2] : tensor<2x4x8xf32> -> tensor<4xf32>
  // CHECK: kiln.reduce_max %{{.*}} [2] : tensor<2x4x8xf32> -> tensor<2x4xf32>
  %1 = kiln.reduce_max %a [2] : tensor<2x4x8xf32> -> tensor<2x4xf32>
  return %0, %1 : tensor<4xf32>, tensor<2x4xf32>
}

// CHECK-LABEL: func.func @fusion
func.func @fusion(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  // CHECK: kiln.fusion "fusion_0"(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  // CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<4x8xf32>, %[[Y:.*]]: tensor<4x8xf32>):
  // CHECK: kiln.yield %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4x8xf32>
  %r:2 = kiln.fusion "fusion_0" (%a, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf32>) {
  ^bb0(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>):
    %one = kiln.constant 1.0 : tensor<4x8xf32>
    %0 = kiln.add %x, %y : tensor<4x8xf32>
    %1 = kiln.mul %0, %one : tensor<4x8xf32>
    %2 = kiln.reduce_sum %1 [1] : tensor<4x8xf32> -> tensor<4xf32>
    kiln.yield %2, %1 : tensor<4xf32>, tensor<4x8xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @empty_fusion
func.func @empty_fusion() -> tensor<4xf32> {
  // CHECK: kiln.fusion "fusion_1"() : () -> tensor<4xf32>
  %r = kiln.fusion "fusion_1" () : () -> tensor<4xf32> {
    %c = kiln.constant 2.0 : tensor<4xf32>
    kiln.yield %c : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// The edges the verifiers accept (their rejections are in verify-*.mlir).

// CHECK-LABEL: func.func @all_predicates
func.func @all_predicates(%a: tensor<3xi64>, %b: tensor<3xi64>, %p: tensor<3xi1>) -> (tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>) {
  // CHECK: kiln.compare eq, %{{.*}}, %{{.*}} : tensor<3xi64>
  %0 = kiln.compare eq, %a, %b : tensor<3xi64>
  // CHECK: kiln.compare ne, %{{.*}}, %{{.*}} : tensor<3xi64>
  %1 = kiln.compare ne, %a, %b : tensor<3xi64>
  // CHECK: kiln.compare le, %{{.*}}, %{{.*}} : tensor<3xi64>
  %2 = kiln.compare le, %a, %b : tensor<3xi64>
  // CHECK: kiln.compare gt, %{{.*}}, %{{.*}} : tensor<3xi64>
  %3 = kiln.compare gt, %a, %b : tensor<3xi64>
  // CHECK: kiln.compare eq, %{{.*}}, %{{.*}} : tensor<3xi1>
  %4 = kiln.compare eq, %p, %p : tensor<3xi1>
  return %0, %1, %2, %3, %4 : tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>, tensor<3xi1>
}

// CHECK-LABEL: func.func @select_convert_types
func.func @select_convert_types(%c: tensor<2x3xi1>, %a: tensor<2x3xi64>, %b: tensor<2x3xi64>) -> (tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xi1>) {
  // CHECK: kiln.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x3xi64>
  %0 = kiln.select %c, %a, %b : tensor<2x3xi64>
  // CHECK: kiln.convert %{{.*}} : tensor<2x3xi1> -> tensor<2x3xf32>
  %1 = kiln.convert %c : tensor<2x3xi1> -> tensor<2x3xf32>
  // CHECK: kiln.convert %{{.*}} : tensor<2x3xi64> -> tensor<2x3xi1>
  %2 = kiln.convert %0 : tensor<2x3xi64> -> tensor<2x3xi1>
  return %0, %1, %2 : tensor<2x3xi64>, tensor<2x3xf32>, tensor<2x3xi1>
}

// CHECK-LABEL: func.func @rank0_and_unit_dims
func.func @rank0_and_unit_dims(%s: tensor<f32>, %r: tensor<1x8xf16>, %a: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xf16>, tensor<f32>, tensor<f32>, tensor<1xf32>) {
  // CHECK: kiln.broadcast %{{.*}} : tensor<f32> -> tensor<4xf32>
  %0 = kiln.broadcast %s : tensor<f32> -> tensor<4xf32>
  // CHECK: kiln.broadcast %{{.*}} : tensor<1x8xf16> -> tensor<4x8xf16>
  %1 = kiln.broadcast %r : tensor<1x8xf16> -> tensor<4x8xf16>
  // CHECK: kiln.reduce_sum %{{.*}} [0, 1] : tensor<4x8xf32> -> tensor<f32>
  %2 = kiln.reduce_sum %a [0, 1] : tensor<4x8xf32> -> tensor<f32>
  // CHECK: kiln.constant 5.000000e-01 : tensor<f32>
  %4 = kiln.constant 0.5 : tensor<f32>
  // CHECK: kiln.reshape %{{.*}} : tensor<f32> -> tensor<1xf32>
  %5 = kiln.reshape %4 : tensor<f32> -> tensor<1xf32>
  return %0, %1, %2, %4, %5 : tensor<4xf32>, tensor<4x8xf16>, tensor<f32>, tensor<f32>, tensor<1xf32>
}

// CHECK-LABEL: func.func @int_and_rank3_layout
func.func @int_and_rank3_layout(%a: tensor<2x3x4xi64>, %b: tensor<2x4x5xi64>) -> (tensor<4x2x3xi64>, tensor<2x3x5xi64>, tensor<2x3xi64>) {
  // CHECK: kiln.transpose %{{.*}} [2, 0, 1] : tensor<2x3x4xi64> -> tensor<4x2x3xi64>
  %0 = kiln.transpose %a [2, 0, 1] : tensor<2x3x4xi64> -> tensor<4x2x3xi64>
  // CHECK: kiln.matmul %{{.*}}, %{{.*}} : tensor<2x3x4xi64>, tensor<2x4x5xi64> -> tensor<2x3x5xi64>
  %1 = kiln.matmul %a, %b : tensor<2x3x4xi64>, tensor<2x4x5xi64> -> tensor<2x3x5xi64>
  // CHECK: kiln.reduce_max %{{.*}} [2] : tensor<2x3x4xi64> -> tensor<2x3xi64>
  %2 = kiln.reduce_max %a [2] : tensor<2x3x4xi64> -> tensor<2x3xi64>
  return %0, %1, %2 : tensor<4x2x3xi64>, tensor<2x3x5xi64>, tensor<2x3xi64>
}

// CHECK-LABEL: func.func @indexing
func.func @indexing(%w: tensor<50x8xf32>, %i: tensor<6x8xi64>, %g: tensor<6x8xf32>, %b: tensor<4x3xbf16>, %j: tensor<4x2xi64>) -> (tensor<6x8xf32>, tensor<50x8xf32>, tensor<4x2xbf16>) {
  // CHECK: kiln.gather %{{.*}}[%{{.*}}] dim = 0 as "embedding" : tensor<50x8xf32>, tensor<6x8xi64> -> tensor<6x8xf32>
  %0 = kiln.gather %w[%i] dim = 0 as "embedding" : tensor<50x8xf32>, tensor<6x8xi64> -> tensor<6x8xf32>
  // CHECK: kiln.scatter_add %{{.*}}[%{{.*}}], %{{.*}} dim = 0 : tensor<50x8xf32>, tensor<6x8xi64>, tensor<6x8xf32>
  %1 = kiln.scatter_add %w[%i], %g dim = 0 : tensor<50x8xf32>, tensor<6x8xi64>, tensor<6x8xf32>
  // CHECK: kiln.gather %{{.*}}[%{{.*}}] dim = 1 as "gather" : tensor<4x3xbf16>, tensor<4x2xi64> -> tensor<4x2xbf16>
  %2 = kiln.gather %b[%j] dim = 1 as "gather" : tensor<4x3xbf16>, tensor<4x2xi64> -> tensor<4x2xbf16>
  return %0, %1, %2 : tensor<6x8xf32>, tensor<50x8xf32>, tensor<4x2xbf16>
}

// Issue 13, pointwise: erf, rounding, extremes, division modes.
// CHECK-LABEL: func.func @pointwise13
func.func @pointwise13(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %i: tensor<3xi64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<3xi64>) {
  // CHECK: kiln.erf %{{.*}} : tensor<4x8xf32>
  %0 = kiln.erf %a : tensor<4x8xf32>
  // CHECK: kiln.floor %{{.*}} : tensor<4x8xf32>
  %1 = kiln.floor %0 : tensor<4x8xf32>
  // CHECK: kiln.ceil %{{.*}} : tensor<4x8xf32>
  %2 = kiln.ceil %1 : tensor<4x8xf32>
  // CHECK: kiln.round %{{.*}} : tensor<4x8xf32>
  %3 = kiln.round %2 : tensor<4x8xf32>
  // CHECK: kiln.trunc %{{.*}} : tensor<4x8xf32>
  %4 = kiln.trunc %3 : tensor<4x8xf32>
  // CHECK: kiln.maximum %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %5 = kiln.maximum %4, %b : tensor<4x8xf32>
  // CHECK: kiln.minimum %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %6 = kiln.minimum %5, %b : tensor<4x8xf32>
  // CHECK: kiln.floor_div %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %7 = kiln.floor_div %6, %b : tensor<4x8xf32>
  // CHECK: kiln.remainder %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %8 = kiln.remainder %7, %b : tensor<4x8xf32>
  // CHECK: kiln.fmod %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %9 = kiln.fmod %8, %b : tensor<4x8xf32>
  // CHECK: kiln.floor_div %{{.*}}, %{{.*}} : tensor<3xi64>
  %10 = kiln.floor_div %i, %i : tensor<3xi64>
  return %0, %9, %10 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<3xi64>
}

// CHECK-LABEL: func.func @arg_reduce_scan
func.func @arg_reduce_scan(%a: tensor<2x4x8xf32>) -> (tensor<2x8xi64>, tensor<2x4xi64>, tensor<2x4xf32>, tensor<2x4x8xf32>) {
  // CHECK: kiln.argmax %{{.*}} [1] : tensor<2x4x8xf32> -> tensor<2x8xi64>
  %0 = kiln.argmax %a [1] : tensor<2x4x8xf32> -> tensor<2x8xi64>
  // CHECK: kiln.argmin %{{.*}} [2] : tensor<2x4x8xf32> -> tensor<2x4xi64>
  %1 = kiln.argmin %a [2] : tensor<2x4x8xf32> -> tensor<2x4xi64>
  // CHECK: kiln.reduce_min %{{.*}} [2] : tensor<2x4x8xf32> -> tensor<2x4xf32>
  %2 = kiln.reduce_min %a [2] : tensor<2x4x8xf32> -> tensor<2x4xf32>
  // CHECK: kiln.cumsum %{{.*}} [2] : tensor<2x4x8xf32>
  %3 = kiln.cumsum %a [2] : tensor<2x4x8xf32>
  return %0, %1, %2, %3 : tensor<2x8xi64>, tensor<2x4xi64>, tensor<2x4xf32>, tensor<2x4x8xf32>
}
