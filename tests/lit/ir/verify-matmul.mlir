// Verifier errors of kiln.matmul (MatmulOp::verify in ir/lib/KilnOps.cpp:
// ranks, batch dim, contraction dim, result shape, element types; ODS:
// numeric static-shape tensors).
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @matmul_rank_mixed(%a: tensor<2x4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op expects rank-2 operands and result ([M, K] x [K, N]) or rank-3 ones ([B, M, K] x [B, K, N]), got [2, 4, 8] x [8, 16] -> [4, 16]}}
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @matmul_result_rank(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<64xf32> {
  // expected-error @+1 {{'kiln.matmul' op expects rank-2 operands and result ([M, K] x [K, N]) or rank-3 ones ([B, M, K] x [B, K, N]), got [4, 8] x [8, 16] -> [64]}}
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<64xf32>
  return %0 : tensor<64xf32>
}

// -----

// Vector operands (torch.matmul's 1-D cases) are reshapes in the frontend.
func.func @matmul_rank1(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<1xf32> {
  // expected-error @+1 {{'kiln.matmul' op expects rank-2 operands and result ([M, K] x [K, N]) or rank-3 ones ([B, M, K] x [B, K, N]), got [8] x [8] -> [1]}}
  %0 = kiln.matmul %a, %b : tensor<8xf32>, tensor<8xf32> -> tensor<1xf32>
  return %0 : tensor<1xf32>
}

// -----

func.func @matmul_rank4(%a: tensor<1x2x4x8xf32>, %b: tensor<1x2x8x16xf32>) -> tensor<1x2x4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op expects rank-2 operands and result ([M, K] x [K, N]) or rank-3 ones ([B, M, K] x [B, K, N]), got [1, 2, 4, 8] x [1, 2, 8, 16] -> [1, 2, 4, 16]}}
  %0 = kiln.matmul %a, %b : tensor<1x2x4x8xf32>, tensor<1x2x8x16xf32> -> tensor<1x2x4x16xf32>
  return %0 : tensor<1x2x4x16xf32>
}

// -----

// No batch broadcasting: [1, K, N] against B = 2 is an explicit kiln.broadcast.
func.func @matmul_batch(%a: tensor<2x4x8xf32>, %b: tensor<1x8x16xf32>) -> tensor<2x4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op batch dims differ: [2, 4, 8] x [1, 8, 16]}}
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<1x8x16xf32> -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

func.func @matmul_k(%a: tensor<4x8xf32>, %b: tensor<7x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op contraction dims differ: [4, 8] x [7, 16]}}
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<7x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @matmul_batched_k(%a: tensor<2x4x8xf32>, %b: tensor<2x7x16xf32>) -> tensor<2x4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op contraction dims differ: [2, 4, 8] x [2, 7, 16]}}
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x7x16xf32> -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

func.func @matmul_result_n(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x15xf32> {
  // expected-error @+1 {{'kiln.matmul' op result shape [4, 15] does not match [4, 8] x [8, 16]}}
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x15xf32>
  return %0 : tensor<4x15xf32>
}

// -----

func.func @matmul_result_m(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op result shape [8, 16] does not match [4, 8] x [8, 16]}}
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

func.func @matmul_result_batch(%a: tensor<2x4x8xf32>, %b: tensor<2x8x16xf32>) -> tensor<1x4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op result shape [1, 4, 16] does not match [2, 4, 8] x [2, 8, 16]}}
  %0 = kiln.matmul %a, %b : tensor<2x4x8xf32>, tensor<2x8x16xf32> -> tensor<1x4x16xf32>
  return %0 : tensor<1x4x16xf32>
}

// -----

// Mixed precision is explicit: autocast inserts kiln.convert.
func.func @matmul_operand_elements(%a: tensor<4x8xbf16>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op operand and result element types differ}}
  %0 = kiln.matmul %a, %b : tensor<4x8xbf16>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

// bf16 x bf16 gives bf16; an f32 result is a following kiln.convert.
func.func @matmul_result_element(%a: tensor<4x8xbf16>, %b: tensor<8x16xbf16>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op operand and result element types differ}}
  %0 = kiln.matmul %a, %b : tensor<4x8xbf16>, tensor<8x16xbf16> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @matmul_bool(%a: tensor<4x8xi1>, %b: tensor<8x16xi1>) -> tensor<4x16xi1> {
  // expected-error @+1 {{'kiln.matmul' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4x8xi1>'}}
  %0 = kiln.matmul %a, %b : tensor<4x8xi1>, tensor<8x16xi1> -> tensor<4x16xi1>
  return %0 : tensor<4x16xi1>
}

// -----

func.func @matmul_dynamic_rhs(%a: tensor<4x8xf32>, %b: tensor<8x?xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'kiln.matmul' op operand #1 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<8x?xf32>'}}
  %0 = kiln.matmul %a, %b : tensor<4x8xf32>, tensor<8x?xf32> -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}
