// An embedding of a 50,000-row table (Inputs/joint-embedding.input: the
// joint graph of y = e * e, e = embedding(ids, W), with W's gradient, as
// nn::functional::embedding traces it) through kiln::compile's pipeline:
// forward is one kernel, the gather fused with its pointwise consumer;
// backward's weight gradient is a scatter-add into zeros, a kernel of its
// own. No one-hot [6, 50000] tensor and no matmul anywhere.
// RUN: kiln-opt --kiln-pipeline %S/Inputs/joint-embedding.input | FileCheck %s

// CHECK-LABEL: func.func @forward
// CHECK-NOT: kiln.matmul
// CHECK: kiln.fusion "fusion_0"(%arg1, %{{.*}}) : (tensor<50000x8xf32>, tensor<6x8xi64>)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.gather %{{.*}}[%{{.*}}] dim = 0 as "embedding" : tensor<50000x8xf32>, tensor<6x8xi64> -> tensor<6x8xf32>
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.yield
// CHECK-LABEL: func.func @backward
// CHECK-NOT: kiln.matmul
// CHECK: kiln.fusion "fusion_2"(%{{.*}}, %{{.*}}) : (tensor<6x8xi64>, tensor<6x8xf32>) -> tensor<50000x8xf32>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.constant 0.000000e+00 : tensor<50000x8xf32>
// CHECK-NEXT: kiln.scatter_add %{{.*}}[%{{.*}}], %{{.*}} dim = 0 : tensor<50000x8xf32>, tensor<6x8xi64>, tensor<6x8xf32>
// CHECK-NEXT: kiln.yield
// CHECK-NOT: kiln.matmul
