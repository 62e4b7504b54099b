// Every verifier rejects bad shapes with a message naming them.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @matmul_k(%a: tensor<4x8xf32>, %b: tensor<7x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op contraction dims differ: [4, 8] x [7, 16]}}
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<7x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @matmul_rank(%a: tensor<2x4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op expects rank-2 operands and result}}
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @matmul_batch(%a: tensor<2x4x8xf32>, %b: tensor<3x8x16xf32>) -> tensor<2x4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op batch dims differ: [2, 4, 8] x [3, 8, 16]}}
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<3x8x16xf32> -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

func.func @matmul_batched_k(%a: tensor<2x4x8xf32>, %b: tensor<2x7x16xf32>) -> tensor<2x4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op contraction dims differ: [2, 4, 8] x [2, 7, 16]}}
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x7x16xf32> -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

func.func @matmul_batched_result(%a: tensor<2x4x8xf32>, %b: tensor<2x8x16xf32>) -> tensor<1x4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op result shape [1, 4, 16] does not match [2, 4, 8] x [2, 8, 16]}}
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<1x4x16xf32>
  return %0 : tensor<1x4x16xf32>
}

// -----

func.func @matmul_rank4(%a: tensor<1x2x4x8xf32>, %b: tensor<1x2x8x16xf32>) -> tensor<1x2x4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op expects rank-2 operands and result ([M, K] x [K, N]) or rank-3 ones}}
  %0 = kiln.matmul %a, %b : tensor<1x2x4x8xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x4x16xf32>
  return %0 : tensor<1x2x4x16xf32>
}

// -----

func.func @sqrt_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.sqrt' op operand #0 must be}}
  %0 = kiln.sqrt %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @pow_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.pow' op operand #0 must be}}
  %0 = kiln.pow %a, 2.0 : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @matmul_result(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x15xf32> {
  // expected-error @+1 {{'kiln.matmul' op result shape [4, 15] does not match [4, 8] x [8, 16]}}
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x15xf32>
  return %0 : tensor<4x15xf32>
}

// -----

func.func @transpose_perm(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'kiln.transpose' op permutation [1, 1] is not a permutation of [0, 2)}}
  %0 = kiln.transpose %a [1, 1] : tensor<4x8xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

func.func @transpose_shape(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.transpose' op result shape [4, 8] should be [8, 4]}}
  %0 = kiln.transpose %a [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @broadcast_bad(%a: tensor<3xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.broadcast' op cannot broadcast [3] to [4, 8]}}
  %0 = kiln.broadcast %a : tensor<3xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @broadcast_rank(%a: tensor<2x4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.broadcast' op cannot broadcast [2, 4, 8] to [4, 8]}}
  %0 = kiln.broadcast %a : tensor<2x4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @reshape_count(%a: tensor<4x8xf32>) -> tensor<30xf32> {
  // expected-error @+1 {{'kiln.reshape' op cannot reshape [4, 8] (32 elements) to [30] (30 elements)}}
  %0 = kiln.reshape %a : tensor<4x8xf32> -> tensor<30xf32>
  return %0 : tensor<30xf32>
}

// -----

func.func @reduce_unsorted(%a: tensor<2x4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.reduce_sum' op dims [2, 0] must be sorted, unique and in [0, 3)}}
  %0 = kiln.reduce_sum %a [2, 0] : tensor<2x4x8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @reduce_shape(%a: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // expected-error @+1 {{'kiln.reduce_max' op result shape [4, 1] should be [4]}}
  %0 = kiln.reduce_max %a [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  return %0 : tensor<4x1xf32>
}

// -----

func.func @convert_shape(%a: tensor<4x8xf32>) -> tensor<8x4xf16> {
  // expected-error @+1 {{'kiln.convert' op changes the shape from [4, 8] to [8, 4]}}
  %0 = kiln.convert %a : tensor<4x8xf32> -> tensor<8x4xf16>
  return %0 : tensor<8x4xf16>
}

// -----

func.func @constant_bool() -> tensor<2xi1> {
  // expected-error @+1 {{'kiln.constant' op i1 constant must be 0 or 1, got 2}}
  %0 = kiln.constant 2.0 : tensor<2xi1>
  return %0 : tensor<2xi1>
}

// -----

func.func @constant_int() -> tensor<2xi64> {
  // expected-error @+1 {{'kiln.constant' op i64 constant must be integral, got 1.5}}
  %0 = kiln.constant 1.5 : tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

func.func @dynamic_shape(%a: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{'kiln.neg' op operand #0 must be statically shaped tensor}}
  %0 = kiln.neg %a : tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

func.func @add_mismatch(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.add' op requires the same type for all operands and results}}
  %0 = "kiln.add"(%a, %b) : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @fusion_arg_type(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.fusion' op body argument #0 has type 'tensor<4x8xf16>' but operand #0 has type 'tensor<4x8xf32>'}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf16>):
    %c = kiln.constant 1.0 : tensor<4x8xf32>
    kiln.yield %c : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

func.func @fusion_arg_count(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.fusion' op body has 0 arguments but the op has 1 operands}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
    %c = kiln.constant 1.0 : tensor<4x8xf32>
    kiln.yield %c : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

func.func @fusion_yield(%a: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op kiln.yield operand #0 has type 'tensor<4x8xf32>' but result #0 has type 'tensor<4xf32>'}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    kiln.yield %x : tensor<4x8xf32>
  }
  return %r : tensor<4xf32>
}

// -----

func.func @fusion_matmul(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'kiln.fusion' op body may not contain 'kiln.matmul'}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%x: tensor<4x4xf32>):
    %m = kiln.matmul %x, %x : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
    kiln.yield %m : tensor<4x4xf32>
  }
  return %r : tensor<4x4xf32>
}

// -----

func.func @fusion_not_isolated(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-note @+1 {{required by region isolation constraints}}
  %r = kiln.fusion "fusion_0" () : () -> tensor<4xf32> {
    // expected-error @+1 {{using value defined outside the region}}
    %n = kiln.neg %a : tensor<4xf32>
    kiln.yield %n : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

func.func @yield_outside(%a: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.yield' op expects parent op 'kiln.fusion'}}
  kiln.yield %a : tensor<4xf32>
}
