// kiln-fuse: a kiln.gather is a producer over its result shape (pointwise
// consumers, and the producer of its index, join it); the producer of its
// table never joins it; a kiln.scatter_add is a fusion of its own (with its
// cloned constant). See passes/DESIGN.md.
// RUN: kiln-opt %s -kiln-fuse -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @gather_with_consumers
// CHECK: %[[T:.*]] = kiln.fusion "fusion_0"(%{{.*}}) : (tensor<50x8xf32>) -> tensor<50x8xf32> {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.exp
// CHECK-NEXT: kiln.yield
// CHECK: kiln.fusion "fusion_1"(%{{.*}}, %[[T]]) : (tensor<6x8xf32>, tensor<50x8xf32>) -> tensor<6x8xf32> {
// CHECK: kiln.convert
// CHECK-NEXT: kiln.gather
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.relu
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.fusion
func.func @gather_with_consumers(%w: tensor<50x8xf32>, %f: tensor<6x8xf32>) -> tensor<6x8xf32> {
  %t = kiln.exp %w : tensor<50x8xf32>
  %i = kiln.convert %f : tensor<6x8xf32> -> tensor<6x8xi64>
  %g = kiln.gather %t[%i] dim = 0 as "embedding" : tensor<50x8xf32>, tensor<6x8xi64> -> tensor<6x8xf32>
  %m = kiln.mul %g, %f : tensor<6x8xf32>
  %r = kiln.relu %m : tensor<6x8xf32>
  return %r : tensor<6x8xf32>
}

// -----

// CHECK-LABEL: func.func @scatter_alone
// CHECK: %[[G:.*]] = kiln.fusion "fusion_0"(%{{.*}}) : (tensor<6x8xf32>) -> tensor<6x8xf32> {
// CHECK: kiln.neg
// CHECK-NEXT: kiln.yield
// CHECK: %[[S:.*]] = kiln.fusion "fusion_1"(%{{.*}}, %[[G]]) : (tensor<6x8xi64>, tensor<6x8xf32>) -> tensor<50x8xf32> {
// CHECK: kiln.constant
// CHECK-NEXT: kiln.scatter_add
// CHECK-NEXT: kiln.yield
// CHECK: kiln.fusion "fusion_2"(%[[S]]) : (tensor<50x8xf32>) -> tensor<50x8xf32> {
// CHECK: kiln.exp
func.func @scatter_alone(%i: tensor<6x8xi64>, %g: tensor<6x8xf32>) -> tensor<50x8xf32> {
  %n = kiln.neg %g : tensor<6x8xf32>
  %z = kiln.constant 0.0 : tensor<50x8xf32>
  %s = kiln.scatter_add %z[%i], %n dim = 0 : tensor<50x8xf32>, tensor<6x8xi64>, tensor<6x8xf32>
  %e = kiln.exp %s : tensor<50x8xf32>
  return %e : tensor<50x8xf32>
}
