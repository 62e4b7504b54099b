// Verifier errors of the layout ops kiln.transpose, kiln.broadcast and
// kiln.reshape (ir/lib/KilnOps.cpp).
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @transpose_perm_short(%a: tensor<2x4x8xf32>) -> tensor<4x2x8xf32> {
  // expected-error @+1 {{'kiln.transpose' op permutation [1, 0] does not match operand rank 3}}
  %0 = kiln.transpose %a [1, 0] : tensor<2x4x8xf32> -> tensor<4x2x8xf32>
  return %0 : tensor<4x2x8xf32>
}

// -----

func.func @transpose_perm_long(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'kiln.transpose' op permutation [1, 0, 2] does not match operand rank 2}}
  %0 = kiln.transpose %a [1, 0, 2] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_perm_duplicate(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'kiln.transpose' op permutation [1, 1] is not a permutation of [0, 2)}}
  %0 = kiln.transpose %a [1, 1] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_perm_out_of_range(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'kiln.transpose' op permutation [2, 0] is not a permutation of [0, 2)}}
  %0 = kiln.transpose %a [2, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_perm_negative(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'kiln.transpose' op permutation [-1, 0] is not a permutation of [0, 2)}}
  %0 = kiln.transpose %a [-1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_shape(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.transpose' op result shape [4, 8] should be [8, 4]}}
  %0 = kiln.transpose %a [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @transpose_element(%a: tensor<4x8xf32>) -> tensor<8x4xf16> {
  // expected-error @+1 {{'kiln.transpose' op operand and result element types differ}}
  %0 = kiln.transpose %a [1, 0] : tensor<4x8xf32> -> tensor<8x4xf16>
  return %0 : tensor<8x4xf16>
}

// -----

func.func @transpose_dynamic(%a: tensor<4x?xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{'kiln.transpose' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<4x?xf32>'}}
  %0 = kiln.transpose %a [1, 0] : tensor<4x?xf32> -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}

// -----

func.func @broadcast_dim(%a: tensor<3xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.broadcast' op cannot broadcast [3] to [4, 8]}}
  %0 = kiln.broadcast %a : tensor<3xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Dims align from the right: [4] does not broadcast to [4, 8].
func.func @broadcast_left_aligned(%a: tensor<4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.broadcast' op cannot broadcast [4] to [4, 8]}}
  %0 = kiln.broadcast %a : tensor<4xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Broadcasting only grows: a dim of the result cannot be 1 where the operand's is not.
func.func @broadcast_shrink(%a: tensor<4x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'kiln.broadcast' op cannot broadcast [4, 8] to [1, 8]}}
  %0 = kiln.broadcast %a : tensor<4x8xf32> -> tensor<1x8xf32>
  return %0 : tensor<1x8xf32>
}

// -----

func.func @broadcast_rank(%a: tensor<2x4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.broadcast' op cannot broadcast [2, 4, 8] to [4, 8]}}
  %0 = kiln.broadcast %a : tensor<2x4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @broadcast_element(%a: tensor<8xi64>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.broadcast' op operand and result element types differ}}
  %0 = kiln.broadcast %a : tensor<8xi64> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @broadcast_dynamic_result(%a: tensor<8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.broadcast' op result #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<?x8xf32>'}}
  %0 = kiln.broadcast %a : tensor<8xf32> -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

func.func @reshape_count(%a: tensor<4x8xf32>) -> tensor<30xf32> {
  // expected-error @+1 {{'kiln.reshape' op cannot reshape [4, 8] (32 elements) to [30] (30 elements)}}
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<30xf32>
  return %0 : tensor<30xf32>
}

// -----

func.func @reshape_to_scalar(%a: tensor<2xf32>) -> tensor<f32> {
  // expected-error @+1 {{'kiln.reshape' op cannot reshape [2] (2 elements) to [] (1 elements)}}
  %0 = kiln.reshape %a : tensor<2xf32> -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @reshape_element(%a: tensor<4x8xf32>) -> tensor<32xbf16> {
  // expected-error @+1 {{'kiln.reshape' op operand and result element types differ}}
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<32xbf16>
  return %0 : tensor<32xbf16>
}

// -----

// f64 is a Kiln type now; f8 is not.
func.func @reshape_f8(%a: tensor<4x8xf8E4M3FN>) -> tensor<32xf8E4M3FN> {
  // expected-error @+1 {{'kiln.reshape' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<4x8xf8E4M3FN>'}}
  %0 = kiln.reshape %a : tensor<4x8xf8E4M3FN> -> tensor<32xf8E4M3FN>
  return %0 : tensor<32xf8E4M3FN>
}
