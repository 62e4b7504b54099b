// Verifier errors of kiln.constant, kiln.convert (ConstantOp::verify and
// ConvertOp::verify in ir/lib/KilnOps.cpp), kiln.compare and kiln.select
// (ODS: SameTypeOperands, TypesMatchWith, element types).
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @constant_bool() -> tensor<2xi1> {
  // expected-error @+1 {{'kiln.constant' op i1 constant must be 0 or 1, got 2}}
  %0 = kiln.constant 2.0 : tensor<2xi1>
  return %0 : tensor<2xi1>
}

// -----

func.func @constant_bool_negative() -> tensor<2xi1> {
  // expected-error @+1 {{'kiln.constant' op i1 constant must be 0 or 1, got -1}}
  %0 = kiln.constant -1.0 : tensor<2xi1>
  return %0 : tensor<2xi1>
}

// -----

func.func @constant_int() -> tensor<2xi64> {
  // expected-error @+1 {{'kiln.constant' op i64 constant must be integral, got 1.5}}
  %0 = kiln.constant 1.5 : tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

func.func @constant_int_nan() -> tensor<2xi64> {
  // expected-error @+1 {{'kiln.constant' op i64 constant must be integral, got nan}}
  %0 = kiln.constant 0x7FF8000000000000 : tensor<2xi64>
  return %0 : tensor<2xi64>
}

// -----

func.func @constant_dynamic() -> tensor<?xf32> {
  // expected-error @+1 {{'kiln.constant' op result #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<?xf32>'}}
  %0 = kiln.constant 0.0 : tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

// f64 is a Kiln type now; f8 is not.
func.func @constant_f8() -> tensor<2xf8E4M3FN> {
  // expected-error @+1 {{'kiln.constant' op result #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<2xf8E4M3FN>'}}
  %0 = kiln.constant 0.0 : tensor<2xf8E4M3FN>
  return %0 : tensor<2xf8E4M3FN>
}

// -----

func.func @convert_shape(%a: tensor<4x8xf32>) -> tensor<8x4xf16> {
  // expected-error @+1 {{'kiln.convert' op changes the shape from [4, 8] to [8, 4]; convert only casts the element type}}
  %0 = kiln.convert %a : tensor<4x8xf32> -> tensor<8x4xf16>
  return %0 : tensor<8x4xf16>
}

// -----

func.func @convert_rank(%a: tensor<4x8xf32>) -> tensor<32xf32> {
  // expected-error @+1 {{'kiln.convert' op changes the shape from [4, 8] to [32]; convert only casts the element type}}
  %0 = kiln.convert %a : tensor<4x8xf32> -> tensor<32xf32>
  return %0 : tensor<32xf32>
}

// -----

// f64 is a Kiln type now; f8 is not.
func.func @convert_f8(%a: tensor<4xf32>) -> tensor<4xf8E4M3FN> {
  // expected-error @+1 {{'kiln.convert' op result #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<4xf8E4M3FN>'}}
  %0 = kiln.convert %a : tensor<4xf32> -> tensor<4xf8E4M3FN>
  return %0 : tensor<4xf8E4M3FN>
}

// -----

func.func @convert_i32(%a: tensor<4xi32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.convert' op operand #0 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 1-bit signless integer values, but got 'tensor<4xi32>'}}
  %0 = kiln.convert %a : tensor<4xi32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @compare_operand_types(%a: tensor<4xf32>, %b: tensor<4xf16>) -> tensor<4xi1> {
  // expected-error @+1 {{'kiln.compare' op requires all operands to have the same type}}
  %0 = "kiln.compare"(%a, %b) <{predicate = 2 : i64}> : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @compare_operand_shapes(%a: tensor<4xf32>, %b: tensor<1xf32>) -> tensor<4xi1> {
  // expected-error @+1 {{'kiln.compare' op requires all operands to have the same type}}
  %0 = "kiln.compare"(%a, %b) <{predicate = 0 : i64}> : (tensor<4xf32>, tensor<1xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @compare_result_not_bool(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.compare' op result #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = "kiln.compare"(%a, %b) <{predicate = 2 : i64}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @compare_result_shape(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<32xi1> {
  // expected-error @+1 {{'kiln.compare' op failed to verify that result is an i1 tensor of the operands' shape}}
  %0 = "kiln.compare"(%a, %b) <{predicate = 2 : i64}> : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<32xi1>
  return %0 : tensor<32xi1>
}

// -----

func.func @compare_bad_predicate(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error @+1 {{custom op 'kiln.compare' expected string or keyword containing one of the following enum values for attribute 'predicate' [eq, ne, lt, le, gt, ge]}}
  %0 = kiln.compare ult, %a, %b : tensor<4xf32>
  return %0 : tensor<4xi1>
}

// -----

func.func @compare_predicate_out_of_range(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error @+1 {{invalid properties {predicate = 6 : i64} for op kiln.compare: Invalid attribute `predicate` in property conversion: 6 : i64}}
  %0 = "kiln.compare"(%a, %b) <{predicate = 6 : i64}> : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

func.func @select_cond_not_bool(%c: tensor<4xf32>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.select' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = "kiln.select"(%c, %a, %b) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// No implicit broadcast of the condition.
func.func @select_cond_shape(%c: tensor<1xi1>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.select' op failed to verify that condition is an i1 tensor of the result's shape}}
  %0 = "kiln.select"(%c, %a, %b) : (tensor<1xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @select_branch_types(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xbf16>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.select' op failed to verify that all of {true_value, false_value, result} have same type}}
  %0 = "kiln.select"(%c, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @select_result_type(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf16> {
  // expected-error @+1 {{'kiln.select' op failed to verify that all of {true_value, false_value, result} have same type}}
  %0 = "kiln.select"(%c, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf16>
  return %0 : tensor<4xf16>
}
