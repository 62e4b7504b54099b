// kiln-remat at the default budget (1): the min-cut over cheap ops. Without
// kiln-remat (LEGACY) kiln-partition saves every forward value backward reads
// except views and constants.
// RUN: kiln-opt %s -kiln-remat -kiln-partition -split-input-file | FileCheck %s
// RUN: kiln-opt %s -kiln-partition -split-input-file | FileCheck %s --check-prefix=LEGACY

// a = h * tanh(h), h = x @ w, y = sum(a * a, 1). Backward reads h,
// t = tanh(h) and a, each through fusible ops. The matmul may not be
// recomputed, so the cheapest cut saves h alone (256 B instead of 768 B)
// and backward recomputes tanh and mul, just before their first user.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<4xf32>, tensor<4x16xf32>)
// CHECK-SAME: kiln.num_saved = 1 : i64, kiln.saved_bytes = 256 : i64
// CHECK: %[[H:.*]] = kiln.matmul
// CHECK: return %{{.*}}, %[[H]] :
// CHECK-LABEL: func.func @backward
// CHECK-SAME: %[[SH:[^:]+]]: tensor<4x16xf32> {kiln.role = "saved"}
// CHECK-SAME: kiln.recompute_flops = 128 : i64, kiln.recomputed = {kiln.mul = 1 : i64, kiln.tanh = 1 : i64}
// CHECK: kiln.broadcast
// CHECK: %[[T:.*]] = kiln.tanh %[[SH]]
// CHECK-NEXT: %[[A:.*]] = kiln.mul %[[SH]], %[[T]]
// CHECK-NEXT: kiln.mul %[[A]], %{{.*}}
// CHECK-NOT: kiln.tanh
// CHECK: return
// LEGACY-LABEL: func.func @forward
// LEGACY-SAME: -> (tensor<4xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>)
// LEGACY-SAME: kiln.num_saved = 3 : i64, kiln.saved_bytes = 768 : i64
// LEGACY-LABEL: func.func @backward
// LEGACY-SAME: kiln.recompute_flops = 0 : i64, kiln.recomputed = {}
func.func @joint(%x: tensor<4x8xf32> {kiln.role = "primal"},
                 %w: tensor<8x16xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<8x16xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %h = kiln.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %t = kiln.tanh %h : tensor<4x16xf32>
  %a = kiln.mul %h, %t : tensor<4x16xf32>
  %s = kiln.mul %a, %a : tensor<4x16xf32>
  %y = kiln.reduce_sum %s [1] : tensor<4x16xf32> -> tensor<4xf32>
  %g1 = kiln.reshape %g : tensor<4xf32> -> tensor<4x1xf32>
  %gs = kiln.broadcast %g1 : tensor<4x1xf32> -> tensor<4x16xf32>
  %two = kiln.constant 2.0 : tensor<4x16xf32>
  %a2 = kiln.mul %a, %two : tensor<4x16xf32>
  %ga = kiln.mul %gs, %a2 : tensor<4x16xf32>
  %one = kiln.constant 1.0 : tensor<4x16xf32>
  %tt = kiln.mul %t, %t : tensor<4x16xf32>
  %d = kiln.sub %one, %tt : tensor<4x16xf32>
  %hd = kiln.mul %h, %d : tensor<4x16xf32>
  %dd = kiln.add %t, %hd : tensor<4x16xf32>
  %gh = kiln.mul %ga, %dd : tensor<4x16xf32>
  %xt = kiln.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %gw = kiln.matmul %xt, %gh : tensor<8x4xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
  return %y, %gw : tensor<4xf32>, tensor<8x16xf32>
}

// -----

// The same a = h * tanh(h), now also the input of a matmul (y = a @ v)
// whose weight gradient reads a through a transpose: a would be written
// out in backward anyway, so it is not recomputed (PyTorch's
// ban_recompute_materialized_backward) and is saved with h (512 B); only
// tanh is recomputed, just before its first user.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<4x8xf32>, tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK-SAME: kiln.num_saved = 2 : i64, kiln.saved_bytes = 512 : i64
// CHECK: %[[H:.*]] = kiln.matmul
// CHECK: %[[A:.*]] = kiln.mul
// CHECK: return %{{.*}}, %[[H]], %[[A]] :
// CHECK-LABEL: func.func @backward
// CHECK-SAME: %[[SH:[^:]+]]: tensor<4x16xf32> {kiln.role = "saved"}, %[[SA:[^:]+]]: tensor<4x16xf32> {kiln.role = "saved"}
// CHECK-SAME: kiln.recompute_flops = 64 : i64, kiln.recomputed = {kiln.tanh = 1 : i64}
// CHECK: kiln.transpose %[[SA]]
// CHECK: kiln.constant
// CHECK-NEXT: %[[T:.*]] = kiln.tanh %[[SH]]
// CHECK-NEXT: kiln.mul %[[T]], %[[T]]
// LEGACY-LABEL: func.func @forward
// LEGACY-SAME: kiln.num_saved = 3 : i64, kiln.saved_bytes = 768 : i64
func.func @joint(%x: tensor<4x8xf32> {kiln.role = "primal"},
                 %w: tensor<8x16xf32> {kiln.role = "primal"},
                 %v: tensor<16x8xf32> {kiln.role = "primal"},
                 %g: tensor<4x8xf32> {kiln.role = "tangent"})
    -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %h = kiln.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %t = kiln.tanh %h : tensor<4x16xf32>
  %a = kiln.mul %h, %t : tensor<4x16xf32>
  %y = kiln.matmul %a, %v : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  %at = kiln.transpose %a [1, 0] : tensor<4x16xf32> -> tensor<16x4xf32>
  %gv = kiln.matmul %at, %g : tensor<16x4xf32>, tensor<4x8xf32> -> tensor<16x8xf32>
  %vt = kiln.transpose %v [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %ga = kiln.matmul %g, %vt : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %one = kiln.constant 1.0 : tensor<4x16xf32>
  %tt = kiln.mul %t, %t : tensor<4x16xf32>
  %d = kiln.sub %one, %tt : tensor<4x16xf32>
  %hd = kiln.mul %h, %d : tensor<4x16xf32>
  %dd = kiln.add %t, %hd : tensor<4x16xf32>
  %gh = kiln.mul %ga, %dd : tensor<4x16xf32>
  %xt = kiln.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %gw = kiln.matmul %xt, %gh : tensor<8x4xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
  return %y, %gw, %gv : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>
}

// -----

// log(sum(exp(x), 1)): the reduction shrinks its operand 16x, so it is not
// recomputed by default and its 16-byte result is saved; exp(x) is
// recomputed from the primal instead of saving 1 KiB.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<4xf32>, tensor<4xf32>)
// CHECK-SAME: kiln.num_saved = 1 : i64, kiln.saved_bytes = 16 : i64
// CHECK: %[[S:.*]] = kiln.reduce_sum
// CHECK: return %{{.*}}, %[[S]] :
// CHECK-LABEL: func.func @backward
// CHECK-SAME: kiln.recompute_flops = 256 : i64, kiln.recomputed = {kiln.exp = 1 : i64}
// CHECK-NOT: kiln.reduce_sum
// CHECK: kiln.exp
// LEGACY-LABEL: func.func @forward
// LEGACY-SAME: kiln.num_saved = 2 : i64, kiln.saved_bytes = 1040 : i64
func.func @joint(%x: tensor<4x64xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4x64xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %e = kiln.exp %x : tensor<4x64xf32>
  %s = kiln.reduce_sum %e [1] : tensor<4x64xf32> -> tensor<4xf32>
  %l = kiln.log %s : tensor<4xf32>
  %r = kiln.div %g, %s : tensor<4xf32>
  %r1 = kiln.reshape %r : tensor<4xf32> -> tensor<4x1xf32>
  %rb = kiln.broadcast %r1 : tensor<4x1xf32> -> tensor<4x64xf32>
  %gx = kiln.mul %e, %rb : tensor<4x64xf32>
  return %l, %gx : tensor<4xf32>, tensor<4x64xf32>
}

// -----

// The same over [4, 2]: a reduction that shrinks its operand only 2x is
// cheap, so nothing is saved.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> tensor<4xf32>
// CHECK-SAME: kiln.num_saved = 0 : i64, kiln.saved_bytes = 0 : i64
// CHECK-LABEL: func.func @backward
// CHECK-SAME: kiln.recompute_flops = 16 : i64, kiln.recomputed = {kiln.exp = 1 : i64, kiln.reduce_sum = 1 : i64}
func.func @joint(%x: tensor<4x2xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4x2xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %e = kiln.exp %x : tensor<4x2xf32>
  %s = kiln.reduce_sum %e [1] : tensor<4x2xf32> -> tensor<4xf32>
  %l = kiln.log %s : tensor<4xf32>
  %r = kiln.div %g, %s : tensor<4xf32>
  %r1 = kiln.reshape %r : tensor<4xf32> -> tensor<4x1xf32>
  %rb = kiln.broadcast %r1 : tensor<4x1xf32> -> tensor<4x2xf32>
  %gx = kiln.mul %e, %rb : tensor<4x2xf32>
  return %l, %gx : tensor<4xf32>, tensor<4x2xf32>
}

// -----

// A forward output backward reads is saved for free (it is returned
// anyway): it counts in kiln.num_saved, not in kiln.saved_bytes.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: kiln.num_saved = 1 : i64, kiln.saved_bytes = 0 : i64
// CHECK: %[[Y:.*]] = kiln.tanh
// CHECK: return %[[Y]], %[[Y]] :
func.func @joint(%x: tensor<4xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<4xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %y = kiln.tanh %x : tensor<4xf32>
  %yy = kiln.mul %y, %y : tensor<4xf32>
  %gx = kiln.mul %g, %yy : tensor<4xf32>
  return %y, %gx : tensor<4xf32>, tensor<4xf32>
}
