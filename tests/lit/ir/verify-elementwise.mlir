// Verifier errors of the elementwise arithmetic ops (add/sub/mul/div,
// neg/relu/abs, exp/log/sqrt/rsqrt/tanh/sin/cos, pow): their constraints
// are all ODS-generated (SameOperandsAndResultType, element types, static
// shapes); compare/select/convert are in verify-constant-convert-compare-select.mlir.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @add_shape_mismatch(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.add' op requires the same type for all operands and results}}
  %0 = "kiln.add"(%a, %b) : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

func.func @sub_rank_mismatch(%a: tensor<4x8xf32>, %b: tensor<32xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.sub' op requires the same type for all operands and results}}
  %0 = "kiln.sub"(%a, %b) : (tensor<4x8xf32>, tensor<32xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// No implicit promotion: mixed element types need a kiln.convert.
func.func @mul_element_mismatch(%a: tensor<4xf32>, %b: tensor<4xbf16>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.mul' op requires the same type for all operands and results}}
  %0 = "kiln.mul"(%a, %b) : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @div_result_mismatch(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{'kiln.div' op requires the same type for all operands and results}}
  %0 = "kiln.div"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

// Arithmetic is numeric only: i1 is for compare/select.
func.func @add_bool(%a: tensor<4xi1>, %b: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'kiln.add' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4xi1>'}}
  %0 = kiln.add %a, %b : tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

// f64 is accepted (float64 models compile in float64); f8 is not a Kiln type.
func.func @add_f8(%a: tensor<4xf8E4M3FN>, %b: tensor<4xf8E4M3FN>) -> tensor<4xf8E4M3FN> {
  // expected-error @+1 {{'kiln.add' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4xf8E4M3FN>'}}
  %0 = kiln.add %a, %b : tensor<4xf8E4M3FN>
  return %0 : tensor<4xf8E4M3FN>
}

// -----

func.func @mul_i32(%a: tensor<4xi32>, %b: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1 {{'kiln.mul' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4xi32>'}}
  %0 = kiln.mul %a, %b : tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

func.func @neg_dynamic(%a: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{'kiln.neg' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<?xf32>'}}
  %0 = kiln.neg %a : tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

// The custom form only parses ranked tensors; the generic one reaches ODS.
func.func @add_unranked(%a: tensor<*xf32>, %b: tensor<*xf32>) -> tensor<*xf32> {
  // expected-error @+1 {{'kiln.add' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<*xf32>'}}
  %0 = "kiln.add"(%a, %b) : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

func.func @neg_bool(%a: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'kiln.neg' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4xi1>'}}
  %0 = kiln.neg %a : tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @relu_bool(%a: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'kiln.relu' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4xi1>'}}
  %0 = kiln.relu %a : tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @abs_bool(%a: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'kiln.abs' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer values, but got 'tensor<4xi1>'}}
  %0 = kiln.abs %a : tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @neg_result_mismatch(%a: tensor<4xf32>) -> tensor<2x2xf32> {
  // expected-error @+1 {{'kiln.neg' op requires the same type for all operands and results}}
  %0 = "kiln.neg"(%a) : (tensor<4xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// The float-only unary ops reject i64 (one case per op).
func.func @exp_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.exp' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi64>'}}
  %0 = kiln.exp %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @log_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.log' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi64>'}}
  %0 = kiln.log %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @sqrt_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.sqrt' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi64>'}}
  %0 = kiln.sqrt %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @rsqrt_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.rsqrt' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi64>'}}
  %0 = kiln.rsqrt %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @tanh_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.tanh' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi64>'}}
  %0 = kiln.tanh %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @sin_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.sin' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi64>'}}
  %0 = kiln.sin %a : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @cos_bool(%a: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'kiln.cos' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi1>'}}
  %0 = kiln.cos %a : tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @exp_result_mismatch(%a: tensor<4xf32>) -> tensor<4xbf16> {
  // expected-error @+1 {{'kiln.exp' op requires the same type for all operands and results}}
  %0 = "kiln.exp"(%a) : (tensor<4xf32>) -> tensor<4xbf16>
  return %0 : tensor<4xbf16>
}

// -----

func.func @pow_int(%a: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'kiln.pow' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi64>'}}
  %0 = kiln.pow %a, 2.0 : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

func.func @pow_result_mismatch(%a: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{'kiln.pow' op requires the same type for all operands and results}}
  %0 = "kiln.pow"(%a) <{exponent = 2.0 : f64}> : (tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}

// -----

// The exponent is an f64 attribute, not an f32 one.
func.func @pow_exponent_f32(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.pow' op attribute 'exponent' failed to satisfy constraint: 64-bit float attribute}}
  %0 = "kiln.pow"(%a) <{exponent = 2.0 : f32}> : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
