// Round trip of the convolution and max pooling ops (KilnOps.td,
// "Convolution and pooling"): print, parse the output again, check it.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @conv2d
func.func @conv2d(%x: tensor<2x4x7x8xf32>, %w: tensor<6x2x3x3xf32>, %gy: tensor<2x6x4x4xf32>)
    -> (tensor<2x6x4x4xf32>, tensor<2x4x7x8xf32>, tensor<6x2x3x3xf32>) {
  // CHECK: kiln.conv2d %{{.*}}, %{{.*}} stride [2, 1] padding [1, 0] dilation [1, 2] groups 2 : tensor<2x4x7x8xf32>, tensor<6x2x3x3xf32> -> tensor<2x6x4x4xf32>
  %0 = kiln.conv2d %x, %w stride [2, 1] padding [1, 0] dilation [1, 2] groups 2 : tensor<2x4x7x8xf32>, tensor<6x2x3x3xf32> -> tensor<2x6x4x4xf32>
  // CHECK: kiln.conv2d_input_grad %{{.*}}, %{{.*}} stride [2, 1] padding [1, 0] dilation [1, 2] groups 2 : tensor<2x6x4x4xf32>, tensor<6x2x3x3xf32> -> tensor<2x4x7x8xf32>
  %1 = kiln.conv2d_input_grad %gy, %w stride [2, 1] padding [1, 0] dilation [1, 2] groups 2 : tensor<2x6x4x4xf32>, tensor<6x2x3x3xf32> -> tensor<2x4x7x8xf32>
  // CHECK: kiln.conv2d_weight_grad %{{.*}}, %{{.*}} stride [2, 1] padding [1, 0] dilation [1, 2] groups 2 : tensor<2x4x7x8xf32>, tensor<2x6x4x4xf32> -> tensor<6x2x3x3xf32>
  %2 = kiln.conv2d_weight_grad %x, %gy stride [2, 1] padding [1, 0] dilation [1, 2] groups 2 : tensor<2x4x7x8xf32>, tensor<2x6x4x4xf32> -> tensor<6x2x3x3xf32>
  return %0, %1, %2 : tensor<2x6x4x4xf32>, tensor<2x4x7x8xf32>, tensor<6x2x3x3xf32>
}

// CHECK-LABEL: func.func @conv2d_bf16
func.func @conv2d_bf16(%x: tensor<1x3x5x5xbf16>, %w: tensor<4x3x3x3xbf16>) -> tensor<1x4x5x5xbf16> {
  // CHECK: kiln.conv2d %{{.*}}, %{{.*}} stride [1, 1] padding [1, 1] dilation [1, 1] groups 1 : tensor<1x3x5x5xbf16>, tensor<4x3x3x3xbf16> -> tensor<1x4x5x5xbf16>
  %0 = kiln.conv2d %x, %w stride [1, 1] padding [1, 1] dilation [1, 1] groups 1 : tensor<1x3x5x5xbf16>, tensor<4x3x3x3xbf16> -> tensor<1x4x5x5xbf16>
  return %0 : tensor<1x4x5x5xbf16>
}

// CHECK-LABEL: func.func @max_pool2d
func.func @max_pool2d(%x: tensor<2x3x7x6xf32>, %gy: tensor<2x3x4x7xf32>)
    -> (tensor<2x3x4x7xf32>, tensor<2x3x7x6xf32>, tensor<2x3x4x7xf32>) {
  // CHECK: kiln.max_pool2d %{{.*}} kernel [3, 2] stride [2, 1] padding [1, 1] : tensor<2x3x7x6xf32> -> tensor<2x3x4x7xf32>
  %0 = kiln.max_pool2d %x kernel [3, 2] stride [2, 1] padding [1, 1] : tensor<2x3x7x6xf32> -> tensor<2x3x4x7xf32>
  // CHECK: %[[I:.*]] = kiln.max_pool2d_indices %{{.*}} kernel [3, 2] stride [2, 1] padding [1, 1] : tensor<2x3x7x6xf32> -> tensor<2x3x4x7xi64>
  %i = kiln.max_pool2d_indices %x kernel [3, 2] stride [2, 1] padding [1, 1] : tensor<2x3x7x6xf32> -> tensor<2x3x4x7xi64>
  // CHECK: kiln.max_pool2d_backward %{{.*}}, %[[I]] : tensor<2x3x4x7xf32>, tensor<2x3x4x7xi64> -> tensor<2x3x7x6xf32>
  %1 = kiln.max_pool2d_backward %gy, %i : tensor<2x3x4x7xf32>, tensor<2x3x4x7xi64> -> tensor<2x3x7x6xf32>
  // CHECK: kiln.max_pool2d_gather %{{.*}}, %[[I]] : tensor<2x3x7x6xf32>, tensor<2x3x4x7xi64> -> tensor<2x3x4x7xf32>
  %2 = kiln.max_pool2d_gather %x, %i : tensor<2x3x7x6xf32>, tensor<2x3x4x7xi64> -> tensor<2x3x4x7xf32>
  return %0, %1, %2 : tensor<2x3x4x7xf32>, tensor<2x3x7x6xf32>, tensor<2x3x4x7xf32>
}
