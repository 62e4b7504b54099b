// Verifier errors of the convolution and max pooling ops (ir/lib/ConvOps.cpp:
// attributes, ranks, groups, the output shape PyTorch's formula gives,
// element types; pool windows and index shapes).
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @conv_output_shape(%x: tensor<1x3x5x5xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x5x5xf32> {
  // expected-error @+1 {{'kiln.conv2d' op expects output shape [1, 4, 3, 3] for input [1, 3, 5, 5] and weight [4, 3, 3, 3], got [1, 4, 5, 5]}}
  %0 = kiln.conv2d %x, %w stride [1, 1] padding [0, 0] dilation [1, 1] groups 1 : tensor<1x3x5x5xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x5x5xf32>
  return %0 : tensor<1x4x5x5xf32>
}

// -----

func.func @conv_groups(%x: tensor<1x4x5x5xf32>, %w: tensor<4x4x3x3xf32>) -> tensor<1x4x3x3xf32> {
  // expected-error @+1 {{'kiln.conv2d' op weight [4, 4, 3, 3] with groups = 2 does not match input [1, 4, 5, 5] (expected weight [O, 2, kH, kW], O and C divisible by groups)}}
  %0 = kiln.conv2d %x, %w stride [1, 1] padding [0, 0] dilation [1, 1] groups 2 : tensor<1x4x5x5xf32>, tensor<4x4x3x3xf32> -> tensor<1x4x3x3xf32>
  return %0 : tensor<1x4x3x3xf32>
}

// -----

func.func @conv_stride(%x: tensor<1x3x5x5xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x3x3xf32> {
  // expected-error @+1 {{'kiln.conv2d' op expects stride and dilation >= 1 and padding >= 0, got stride [0, 1], padding [0, 0], dilation [1, 1]}}
  %0 = kiln.conv2d %x, %w stride [0, 1] padding [0, 0] dilation [1, 1] groups 1 : tensor<1x3x5x5xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x3x3xf32>
  return %0 : tensor<1x4x3x3xf32>
}

// -----

func.func @conv_rank(%x: tensor<3x5x5xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<4x3x3xf32> {
  // expected-error @+1 {{'kiln.conv2d' op expects rank-4 input [N, C, H, W], weight [O, C/groups, kH, kW] and output [N, O, OH, OW], got [3, 5, 5], [4, 3, 3, 3], [4, 3, 3]}}
  %0 = kiln.conv2d %x, %w stride [1, 1] padding [0, 0] dilation [1, 1] groups 1 : tensor<3x5x5xf32>, tensor<4x3x3x3xf32> -> tensor<4x3x3xf32>
  return %0 : tensor<4x3x3xf32>
}

// -----

func.func @conv_types(%x: tensor<1x3x5x5xf32>, %w: tensor<4x3x3x3xbf16>) -> tensor<1x4x3x3xf32> {
  // expected-error @+1 {{'kiln.conv2d' op expects one element type for input, weight and output}}
  %0 = kiln.conv2d %x, %w stride [1, 1] padding [0, 0] dilation [1, 1] groups 1 : tensor<1x3x5x5xf32>, tensor<4x3x3x3xbf16> -> tensor<1x4x3x3xf32>
  return %0 : tensor<1x4x3x3xf32>
}

// -----

// The input gradient's result is the input: its shape must give grad_output's.
func.func @input_grad_shape(%gy: tensor<1x4x3x3xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x3x6x6xf32> {
  // expected-error @+1 {{'kiln.conv2d_input_grad' op expects output shape [1, 4, 4, 4] for input [1, 3, 6, 6] and weight [4, 3, 3, 3], got [1, 4, 3, 3]}}
  %0 = kiln.conv2d_input_grad %gy, %w stride [1, 1] padding [0, 0] dilation [1, 1] groups 1 : tensor<1x4x3x3xf32>, tensor<4x3x3x3xf32> -> tensor<1x3x6x6xf32>
  return %0 : tensor<1x3x6x6xf32>
}

// -----

func.func @weight_grad_shape(%x: tensor<1x3x5x5xf32>, %gy: tensor<1x4x3x3xf32>) -> tensor<4x3x2x2xf32> {
  // expected-error @+1 {{'kiln.conv2d_weight_grad' op expects output shape [1, 4, 4, 4] for input [1, 3, 5, 5] and weight [4, 3, 2, 2], got [1, 4, 3, 3]}}
  %0 = kiln.conv2d_weight_grad %x, %gy stride [1, 1] padding [0, 0] dilation [1, 1] groups 1 : tensor<1x3x5x5xf32>, tensor<1x4x3x3xf32> -> tensor<4x3x2x2xf32>
  return %0 : tensor<4x3x2x2xf32>
}

// -----

func.func @pool_shape(%x: tensor<1x2x6x6xf32>) -> tensor<1x2x2x2xf32> {
  // expected-error @+1 {{'kiln.max_pool2d' op expects result shape [1, 2, 3, 3] for input [1, 2, 6, 6], got [1, 2, 2, 2]}}
  %0 = kiln.max_pool2d %x kernel [2, 2] stride [2, 2] padding [0, 0] : tensor<1x2x6x6xf32> -> tensor<1x2x2x2xf32>
  return %0 : tensor<1x2x2x2xf32>
}

// -----

func.func @pool_padding(%x: tensor<1x2x6x6xf32>) -> tensor<1x2x4x4xi64> {
  // expected-error @+1 {{'kiln.max_pool2d_indices' op expects kernel, stride >= 1 and 0 <= padding <= kernel / 2, got kernel [2, 2], stride [2, 2], padding [2, 0]}}
  %0 = kiln.max_pool2d_indices %x kernel [2, 2] stride [2, 2] padding [2, 0] : tensor<1x2x6x6xf32> -> tensor<1x2x4x4xi64>
  return %0 : tensor<1x2x4x4xi64>
}

// -----

func.func @pool_backward_indices(%gy: tensor<1x2x3x3xf32>, %i: tensor<1x2x3x2xi64>) -> tensor<1x2x6x6xf32> {
  // expected-error @+1 {{'kiln.max_pool2d_backward' op expects a rank-4 [N, C, H, W] plane and [N, C, OH, OW] windows of the indices' shape [1, 2, 3, 2], got [1, 2, 6, 6] and [1, 2, 3, 3]}}
  %0 = kiln.max_pool2d_backward %gy, %i : tensor<1x2x3x3xf32>, tensor<1x2x3x2xi64> -> tensor<1x2x6x6xf32>
  return %0 : tensor<1x2x6x6xf32>
}

// -----

func.func @pool_gather_channels(%x: tensor<1x3x6x6xf32>, %i: tensor<1x2x3x3xi64>) -> tensor<1x2x3x3xf32> {
  // expected-error @+1 {{'kiln.max_pool2d_gather' op expects one N and C in [1, 3, 6, 6] and [1, 2, 3, 3]}}
  %0 = kiln.max_pool2d_gather %x, %i : tensor<1x3x6x6xf32>, tensor<1x2x3x3xi64> -> tensor<1x2x3x3xf32>
  return %0 : tensor<1x2x3x3xf32>
}
