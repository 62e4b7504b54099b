// Verifier errors of kiln.reduce_sum / reduce_max / reduce_min (verifyReduce in
// ir/lib/KilnOps.cpp: dims, result shape, element type; ODS: element types).
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @reduce_unsorted(%a: tensor<2x4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.reduce_sum' op dims [2, 0] must be sorted, unique and in [0, 3) for operand shape [2, 4, 8]}}
  %0 = kiln.reduce_sum %a [2, 0] : tensor<2x4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_duplicate(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.reduce_sum' op dims [1, 1] must be sorted, unique and in [0, 2) for operand shape [4, 8]}}
  %0 = kiln.reduce_sum %a [1, 1] : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_out_of_range(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.reduce_max' op dims [2] must be sorted, unique and in [0, 2) for operand shape [4, 8]}}
  %0 = kiln.reduce_max %a [2] : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Negative (PyTorch-style from-the-end) dims are normalized by the frontend.
func.func @reduce_negative(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.reduce_max' op dims [-1] must be sorted, unique and in [0, 2) for operand shape [4, 8]}}
  %0 = kiln.reduce_max %a [-1] : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// keepdim is a following kiln.reshape: the reduced dim must be dropped.
func.func @reduce_keepdim(%a: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // expected-error @+1 {{'kiln.reduce_max' op result shape [4, 1] should be [4] (operand [4, 8] reduced over [1])}}
  %0 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

// -----

func.func @reduce_wrong_dim_kept(%a: tensor<4x8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'kiln.reduce_sum' op result shape [8] should be [4] (operand [4, 8] reduced over [1])}}
  %0 = kiln.reduce_sum %a [1] : tensor<4x8xf32> -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @reduce_all_not_scalar(%a: tensor<4x8xf32>) -> tensor<1xf32> {
  // expected-error @+1 {{'kiln.reduce_sum' op result shape [1] should be [] (operand [4, 8] reduced over [0, 1])}}
  %0 = kiln.reduce_sum %a [0, 1] : tensor<4x8xf32> -> tensor<1xf32>
  return %0 : tensor<1xf32>
}

// -----

func.func @reduce_sum_element(%a: tensor<4x8xbf16>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.reduce_sum' op operand and result element types differ}}
  %0 = kiln.reduce_sum %a [1] : tensor<4x8xbf16> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_max_element(%a: tensor<4x8xf32>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.reduce_max' op operand and result element types differ}}
  %0 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @reduce_sum_bool(%a: tensor<4x8xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'kiln.reduce_sum' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4x8xi1>'}}
  %0 = kiln.reduce_sum %a [1] : tensor<4x8xi1> -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @reduce_max_dynamic(%a: tensor<4x?xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.reduce_max' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4x?xf32>'}}
  %0 = kiln.reduce_max %a [1] : tensor<4x?xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// kiln.argmax / kiln.argmin / kiln.cumsum take exactly one dim (verifyOneDim).
func.func @argmax_two_dims(%a: tensor<4x8xf32>) -> tensor<i64> {
  // expected-error @+1 {{'kiln.argmax' op dims [0, 1] must be exactly one dim in [0, 2) for operand shape [4, 8]}}
  %0 = kiln.argmax %a [0, 1] : tensor<4x8xf32> -> tensor<i64>
  return %0 : tensor<i64>
}

// -----

func.func @argmin_wrong_shape(%a: tensor<4x8xf32>) -> tensor<8xi64> {
  // expected-error @+1 {{'kiln.argmin' op result shape [8] should be [4] (operand [4, 8] reduced over [1])}}
  %0 = kiln.argmin %a [1] : tensor<4x8xf32> -> tensor<8xi64>
  return %0 : tensor<8xi64>
}

// -----

func.func @argmax_float_result(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.argmax' op result #0 must be statically shaped tensor of 64-bit signless integer values}}
  %0 = kiln.argmax %a [1] : tensor<4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @cumsum_out_of_range(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.cumsum' op dims [2] must be exactly one dim in [0, 2) for operand shape [4, 8]}}
  %0 = kiln.cumsum %a [2] : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @reduce_min_type(%a: tensor<4x8xf32>) -> tensor<4xf64> {
  // expected-error @+1 {{'kiln.reduce_min' op operand and result element types differ}}
  %0 = kiln.reduce_min %a [1] : tensor<4x8xf32> -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
