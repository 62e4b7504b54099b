// Verifier errors of kiln.fusion and kiln.yield (FusionOp::verify in
// ir/lib/KilnOps.cpp; ODS: SingleBlock, IsolatedFromAbove, HasParent).
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @fusion_arg_count(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.fusion' op body has 0 arguments but the op has 1 operands}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
    %c = kiln.constant 1.0 : tensor<4x8xf32>
    kiln.yield %c : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

func.func @fusion_extra_arg(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op body has 2 arguments but the op has 1 operands}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>, %y: tensor<4xf32>):
    kiln.yield %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
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

func.func @fusion_second_arg_shape(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.fusion' op body argument #1 has type 'tensor<8x4xf32>' but operand #1 has type 'tensor<4x8xf32>'}}
  %r = kiln.fusion "fusion_0" (%a, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %y: tensor<8x4xf32>):
    kiln.yield %x : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

func.func @fusion_no_terminator(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op body must end with kiln.yield}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %n = kiln.neg %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

func.func @fusion_wrong_terminator(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op body must end with kiln.yield}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    func.return %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// SingleBlock rejects an empty body block before FusionOp::verify runs.
func.func @fusion_empty_block(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op expects a non-empty block}}
  %r = "kiln.fusion"(%a) <{kernel = "fusion_0"}> ({
  ^bb0(%x: tensor<4xf32>):
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @fusion_no_block(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op region #0 ('body') failed to verify constraint: region with 1 blocks}}
  %r = "kiln.fusion"(%a) <{kernel = "fusion_0"}> ({
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @fusion_yield_count(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // expected-error @+1 {{'kiln.fusion' op kiln.yield has 1 operands but the op has 2 results}}
  %r:2 = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%x: tensor<4xf32>):
    kiln.yield %x : tensor<4xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

func.func @fusion_yield_nothing(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op kiln.yield has 0 operands but the op has 1 results}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    kiln.yield
  }
  return %r : tensor<4xf32>
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

func.func @fusion_yield_second_element(%a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf16>) {
  // expected-error @+1 {{'kiln.fusion' op kiln.yield operand #1 has type 'tensor<4xf32>' but result #1 has type 'tensor<4xf16>'}}
  %r:2 = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf16>) {
  ^bb0(%x: tensor<4xf32>):
    kiln.yield %x, %x : tensor<4xf32>, tensor<4xf32>
  }
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf16>
}

// -----

// GEMMs run on a library, never inside a generated kernel.
func.func @fusion_matmul(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'kiln.fusion' op body may not contain 'kiln.matmul' (only kiln.constant, elementwise ops, reductions, kiln.gather, kiln.scatter_add, and kiln.reshape / kiln.broadcast in a row fusion)}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%x: tensor<4x4xf32>):
    %m = kiln.matmul %x, %x : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
    kiln.yield %m : tensor<4x4xf32>
  }
  return %r : tensor<4x4xf32>
}

// -----

// Layout ops are views outside fusions, not kernel ops.
func.func @fusion_transpose(%a: tensor<4x8xf32>) -> tensor<8x4xf32> {
  // expected-error @+1 {{'kiln.fusion' op body may not contain 'kiln.transpose' (only kiln.constant, elementwise ops, reductions, kiln.gather, kiln.scatter_add, and kiln.reshape / kiln.broadcast in a row fusion)}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<8x4xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %t = kiln.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
    kiln.yield %t : tensor<8x4xf32>
  }
  return %r : tensor<8x4xf32>
}

// -----

func.func @fusion_nested(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op body may not contain 'kiln.fusion' (only kiln.constant, elementwise ops, reductions, kiln.gather, kiln.scatter_add, and kiln.reshape / kiln.broadcast in a row fusion)}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    %i = kiln.fusion "fusion_1" (%x) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%y: tensor<4xf32>):
      %n = kiln.neg %y : tensor<4xf32>
      kiln.yield %n : tensor<4xf32>
    }
    kiln.yield %i : tensor<4xf32>
  }
  return %r : tensor<4xf32>
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

func.func @fusion_kernel_not_string(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{invalid properties {kernel = 0 : i64} for op kiln.fusion: Invalid attribute `kernel` in property conversion: 0 : i64}}
  %r = "kiln.fusion"(%a) <{kernel = 0 : i64}> ({
  ^bb0(%x: tensor<4xf32>):
    "kiln.yield"(%x) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @yield_outside(%a: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.yield' op expects parent op 'kiln.fusion'}}
  kiln.yield %a : tensor<4xf32>
}

// -----

// The fusion verifier sees the first kiln.yield as a non-fusible body op.
func.func @yield_not_last(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'kiln.fusion' op body may not contain 'kiln.yield' (only kiln.constant, elementwise ops, reductions, kiln.gather, kiln.scatter_add, and kiln.reshape / kiln.broadcast in a row fusion)}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: tensor<4xf32>):
    kiln.yield %x : tensor<4xf32>
    kiln.yield %x : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}

// -----

// A row fusion (layer norm's mean): reduce the trailing dim, reshape the
// row sums to [R, 1], broadcast back over the row. Verifies.
func.func @fusion_row_ok(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %s = kiln.reduce_sum %x [1] : tensor<4x8xf32> -> tensor<4xf32>
    %k = kiln.reshape %s : tensor<4xf32> -> tensor<4x1xf32>
    %b = kiln.broadcast %k : tensor<4x1xf32> -> tensor<4x8xf32>
    %d = kiln.sub %x, %b : tensor<4x8xf32>
    kiln.yield %d : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

// Layout ops need a reduction that defines the rows.
func.func @fusion_row_no_reduction(%a: tensor<4x1xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.fusion' op body has layout ops but is not a row fusion: no reduction}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x1xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x1xf32>):
    %b = kiln.broadcast %x : tensor<4x1xf32> -> tensor<4x8xf32>
    kiln.yield %b : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

// Rows are leading dims: a reduction of dim 0 has none.
func.func @fusion_row_leading_reduction(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.fusion' op body has layout ops but is not a row fusion: reduction over dims that are not the trailing dims of [4, 8]}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %s = kiln.reduce_sum %x [0] : tensor<4x8xf32> -> tensor<8xf32>
    %k = kiln.reshape %s : tensor<8xf32> -> tensor<1x8xf32>
    %b = kiln.broadcast %k : tensor<1x8xf32> -> tensor<4x8xf32>
    kiln.yield %b : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

// A broadcast into the space must come from a row shape of full rank.
func.func @fusion_row_column_broadcast(%a: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'kiln.fusion' op body has layout ops but is not a row fusion: operand of shape [8] of 'kiln.broadcast' is neither [4, 8] nor a row shape}}
  %r = kiln.fusion "fusion_0" (%a, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: tensor<4x8xf32>, %v: tensor<8xf32>):
    %s = kiln.reduce_sum %x [1] : tensor<4x8xf32> -> tensor<4xf32>
    %b = kiln.broadcast %v : tensor<8xf32> -> tensor<4x8xf32>
    %d = kiln.sub %x, %b : tensor<4x8xf32>
    kiln.yield %d : tensor<4x8xf32>
  }
  return %r : tensor<4x8xf32>
}

// -----

// A reshape may only move between row shapes.
func.func @fusion_row_reshape_space(%a: tensor<4x8xf32>) -> tensor<32xf32> {
  // expected-error @+1 {{'kiln.fusion' op body has layout ops but is not a row fusion: result of shape [32] of 'kiln.reshape' is neither [4, 8] nor a row shape}}
  %r = kiln.fusion "fusion_0" (%a) : (tensor<4x8xf32>) -> tensor<32xf32> {
  ^bb0(%x: tensor<4x8xf32>):
    %s = kiln.reduce_sum %x [1] : tensor<4x8xf32> -> tensor<4xf32>
    %f = kiln.reshape %x : tensor<4x8xf32> -> tensor<32xf32>
    kiln.yield %f : tensor<32xf32>
  }
  return %r : tensor<32xf32>
}
