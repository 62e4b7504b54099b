// Verifier errors of kiln.gather / kiln.scatter_add (ir/lib/KilnOps.cpp:
// dim, index shape against the input and src, the gather's source; ODS:
// element types, an int64 index).
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @gather_dim(%a: tensor<4x3xf32>, %i: tensor<4x3xi64>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'kiln.gather' op dim 2 is outside [0, 2) for input [4, 3]}}
  %0 = kiln.gather %a[%i] dim = 2 as "gather" : tensor<4x3xf32>, tensor<4x3xi64> -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @gather_result_shape(%a: tensor<4x3xf32>, %i: tensor<2x3xi64>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'kiln.gather' op result [4, 3] must have the index's shape [2, 3]}}
  %0 = kiln.gather %a[%i] dim = 0 as "gather" : tensor<4x3xf32>, tensor<2x3xi64> -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @gather_index_too_large(%a: tensor<4x3xf32>, %i: tensor<2x5xi64>) -> tensor<2x5xf32> {
  // expected-error @+1 {{'kiln.gather' op index [2, 5] is larger than input [4, 3] in dimension 1}}
  %0 = kiln.gather %a[%i] dim = 0 as "gather" : tensor<4x3xf32>, tensor<2x5xi64> -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @gather_index_rank(%a: tensor<4x3xf32>, %i: tensor<6xi64>) -> tensor<6xf32> {
  // expected-error @+1 {{'kiln.gather' op index [6] must have the rank of input [4, 3]}}
  %0 = kiln.gather %a[%i] dim = 0 as "gather" : tensor<4x3xf32>, tensor<6xi64> -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

func.func @gather_source(%a: tensor<4x3xf32>, %i: tensor<2x3xi64>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'kiln.gather' op source must be "gather", "index_select" or "embedding", got "take"}}
  %0 = kiln.gather %a[%i] dim = 0 as "take" : tensor<4x3xf32>, tensor<2x3xi64> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @gather_element_type(%a: tensor<4x3xf32>, %i: tensor<2x3xi64>) -> tensor<2x3xf16> {
  // expected-error @+1 {{'kiln.gather' op failed to verify that all of {input, result} have same element type}}
  %0 = kiln.gather %a[%i] dim = 0 as "gather" : tensor<4x3xf32>, tensor<2x3xi64> -> tensor<2x3xf16>
  return %0 : tensor<2x3xf16>
}

// -----

func.func @gather_float_index(%a: tensor<4x3xf32>, %i: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'kiln.gather' op operand #1 must be statically shaped tensor of 64-bit signless integer values}}
  %0 = kiln.gather %a[%i] dim = 0 as "gather" : tensor<4x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @scatter_index_larger_than_src(%a: tensor<4x3xf32>, %i: tensor<3x3xi64>, %s: tensor<2x3xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'kiln.scatter_add' op index [3, 3] is larger than src [2, 3] in dimension 0}}
  %0 = kiln.scatter_add %a[%i], %s dim = 0 : tensor<4x3xf32>, tensor<3x3xi64>, tensor<2x3xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @scatter_index_larger_than_input(%a: tensor<4x3xf32>, %i: tensor<2x4xi64>, %s: tensor<2x4xf32>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'kiln.scatter_add' op index [2, 4] is larger than input [4, 3] in dimension 1}}
  %0 = kiln.scatter_add %a[%i], %s dim = 0 : tensor<4x3xf32>, tensor<2x4xi64>, tensor<2x4xf32>
  return %0 : tensor<4x3xf32>
}

// -----

func.func @scatter_src_type(%a: tensor<4x3xf32>, %i: tensor<2x3xi64>, %s: tensor<2x3xbf16>) -> tensor<4x3xf32> {
  // expected-error @+1 {{'kiln.scatter_add' op failed to verify that all of {input, src} have same element type}}
  %0 = kiln.scatter_add %a[%i], %s dim = 0 : tensor<4x3xf32>, tensor<2x3xi64>, tensor<2x3xbf16>
  return %0 : tensor<4x3xf32>
}
