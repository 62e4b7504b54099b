// kiln-autocast's cast cleanup: convert pairs that are identities go,
// roundings stay; bad options are errors.
// RUN: kiln-opt %s -kiln-autocast="dtype=bf16" -split-input-file | FileCheck %s
// RUN: not kiln-opt %s -kiln-autocast="dtype=f64" -split-input-file 2>&1 | FileCheck %s --check-prefix=ERR

// ERR: kiln-autocast: dtype must be bf16 or f16, got 'f64'

// bf16 -> f32 -> bf16 is the identity: the matmul reads %a itself and the
// widening convert, now unused, is removed (net: W's convert added, one
// removed, plus the result's convert back to f32).
// CHECK: module attributes {kiln.autocast = {casts_inserted = 1 : i64, casts_removed = 1 : i64
// CHECK-LABEL: func.func @widen_then_narrow
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x8xbf16>, %[[W:[^:]+]]: tensor<8x2xf32>)
// CHECK: %[[WL:.*]] = kiln.convert %[[W]] : tensor<8x2xf32> -> tensor<8x2xbf16>
// CHECK: %[[MM:.*]] = kiln.matmul %[[A]], %[[WL]] : tensor<4x8xbf16>, tensor<8x2xbf16> -> tensor<4x2xbf16>
// CHECK: %[[R:.*]] = kiln.convert %[[MM]] : tensor<4x2xbf16> -> tensor<4x2xf32>
// CHECK-NOT: kiln.convert
// CHECK: return %[[R]]
func.func @widen_then_narrow(%a: tensor<4x8xbf16>, %w: tensor<8x2xf32>) -> tensor<4x2xf32> {
  %af = kiln.convert %a : tensor<4x8xbf16> -> tensor<4x8xf32>
  %mm = kiln.matmul %af, %w : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
  return %mm : tensor<4x2xf32>
}

// -----

// f32 -> bf16 -> f32 rounds to bf16: both converts stay (the user's
// explicit x.to(bf16).to(f32)); exp reads the rounded value.
// CHECK: casts_inserted = 0 : i64, casts_removed = 0 : i64
// CHECK-LABEL: func.func @narrow_then_widen
// CHECK: %[[N:.*]] = kiln.convert %arg0 : tensor<4xf32> -> tensor<4xbf16>
// CHECK: %[[F:.*]] = kiln.convert %[[N]] : tensor<4xbf16> -> tensor<4xf32>
// CHECK: kiln.exp %[[F]] : tensor<4xf32>
func.func @narrow_then_widen(%x: tensor<4xf32>) -> tensor<4xf32> {
  %n = kiln.convert %x : tensor<4xf32> -> tensor<4xbf16>
  %f = kiln.convert %n : tensor<4xbf16> -> tensor<4xf32>
  %e = kiln.exp %f : tensor<4xf32>
  return %e : tensor<4xf32>
}

// -----

// A convert to bf16 of a matmul that now computes in bf16 is a convert to
// the same type: removed.
// CHECK: casts_removed = 1 : i64
// CHECK-LABEL: func.func @same_type
// CHECK: %[[MM:.*]] = kiln.matmul %{{.*}}, %{{.*}} : tensor<4x8xbf16>, tensor<8x2xbf16> -> tensor<4x2xbf16>
// CHECK-NEXT: return %[[MM]] : tensor<4x2xbf16>
func.func @same_type(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> tensor<4x2xbf16> {
  %mm = kiln.matmul %x, %w : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
  %r = kiln.convert %mm : tensor<4x2xf32> -> tensor<4x2xbf16>
  return %r : tensor<4x2xbf16>
}

// -----

// bf16 -> f32 -> f16: the first step is exact, so it is one convert.
// CHECK-LABEL: func.func @compose
// CHECK: %[[H:.*]] = kiln.convert %arg0 : tensor<4xbf16> -> tensor<4xf16>
// CHECK-NEXT: return %[[H]]
func.func @compose(%a: tensor<4xbf16>) -> tensor<4xf16> {
  %f = kiln.convert %a : tensor<4xbf16> -> tensor<4xf32>
  %h = kiln.convert %f : tensor<4xf32> -> tensor<4xf16>
  return %h : tensor<4xf16>
}

// -----

// Integer operands are never cast; a weak constant used by a matmul and by
// an f32 op is re-created once per type, and the original stays for the f32 use.
// CHECK-LABEL: func.func @constants
// CHECK-DAG: kiln.constant 5.000000e-01 : tensor<4x4xf32>
// CHECK-DAG: kiln.constant 5.000000e-01 : tensor<4x4xbf16>
// CHECK: kiln.matmul {{.*}} : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
// CHECK: kiln.exp %{{.*}} : tensor<4x4xf32>
// CHECK: kiln.reduce_sum %arg1 [0] : tensor<4xi64> -> tensor<i64>
func.func @constants(%x: tensor<4x4xf32>, %i: tensor<4xi64>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<i64>) {
  %c = kiln.constant 0.5 : tensor<4x4xf32>
  %mm = kiln.matmul %x, %c : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %e = kiln.exp %c : tensor<4x4xf32>
  %s = kiln.reduce_sum %i [0] : tensor<4xi64> -> tensor<i64>
  return %mm, %e, %s : tensor<4x4xf32>, tensor<4x4xf32>, tensor<i64>
}
