// kiln-remat's memory-budget: 1 (the min-cut over cheap ops), 0.65, 0.5, 0.
// RUN: kiln-opt %s -kiln-remat=memory-budget=1 -kiln-partition | FileCheck %s --check-prefix=B1
// RUN: kiln-opt %s -kiln-remat=memory-budget=0.65 -kiln-partition | FileCheck %s --check-prefix=B065
// RUN: kiln-opt %s -kiln-remat=memory-budget=0.5 -kiln-partition | FileCheck %s --check-prefix=B05
// RUN: kiln-opt %s -kiln-remat=memory-budget=0 -kiln-partition | FileCheck %s --check-prefix=B0

// Two branches: ya = tanh(x @ wa) ([4, 32], 512 B; its matmul costs 512
// FLOPs) and yb = exp(x2 @ wb) ([4, 8], 128 B; its matmul costs 4096 FLOPs).
// Backward reads ya and yb.
//
// Budget 1: matmuls are never recomputed; the cut saves ya and yb (640 B).
// B1-LABEL: func.func @forward
// B1-SAME: -> (tensor<4xf32>, tensor<4x32xf32>, tensor<4x8xf32>)
// B1-SAME: kiln.num_saved = 2 : i64, kiln.saved_bytes = 640 : i64
// B1: %[[YA:.*]] = kiln.tanh
// B1: %[[YB:.*]] = kiln.exp
// B1: return %{{.*}}, %[[YA]], %[[YB]] :
// B1-LABEL: func.func @backward
// B1-SAME: tensor<4x32xf32> {kiln.role = "saved"}, %{{.*}}: tensor<4x8xf32> {kiln.role = "saved"}
// B1-SAME: kiln.recompute_flops = 0 : i64
// B1-NOT: kiln.tanh
// B1-NOT: kiln.exp
// B1: return
//
// A budget is a fraction of the budget-1 cut's estimated peak activation
// memory: its saved bytes plus the larger arena of @forward and @backward
// (partitioned and fused, replayed as the runtime plans them). Here: budget
// 1 saves 640 B next to a 704 B arena, 1344 B; saving only yb, 832 B;
// saving nothing, 704 B (the arena is backward's gradient temporaries,
// each rounded up to 64 B as the runtime's planner places it).
//
// Budget 0.65: target floor(0.65 * 1344) = 873 B. Saving yb only (832 B)
// and saving nothing (704 B) fit; saving yb is the faster step (the
// estimate counts GEMM FLOPs and kernel bytes): backward recomputes x @ wa
// (512 FLOPs) and tanh (128).
// B065-LABEL: func.func @forward
// B065-SAME: -> (tensor<4xf32>, tensor<4x8xf32>)
// B065-SAME: kiln.num_saved = 1 : i64, kiln.saved_bytes = 128 : i64
// B065: %[[YB:.*]] = kiln.exp
// B065: return %{{.*}}, %[[YB]] :
// B065-LABEL: func.func @backward
// B065-SAME: %[[X:[^:]+]]: tensor<4x2xf32> {kiln.role = "primal"}, %[[WA:[^:]+]]: tensor<2x32xf32> {kiln.role = "primal"}
// B065-SAME: %[[SYB:[^:]+]]: tensor<4x8xf32> {kiln.role = "saved"}
// B065-SAME: kiln.recompute_flops = 640 : i64, kiln.recomputed = {kiln.matmul = 1 : i64, kiln.tanh = 1 : i64}
// B065-SAME: kiln.remat_peak = array<i64: 832, 873, 1344>
// B065: %[[A:.*]] = kiln.matmul %[[X]], %[[WA]] : tensor<4x2xf32>, tensor<2x32xf32>
// B065-NEXT: %[[YA:.*]] = kiln.tanh %[[A]]
// B065-NEXT: kiln.mul %[[YA]], %[[YA]]
// B065: kiln.mul %{{.*}}, %[[SYB]]
// B065-NOT: kiln.exp
// B065: return
//
// Budget 0.5: target 672 B; no cut fits, so the smallest one is taken:
// nothing saved (704 B), as at budget 0.
// B05-LABEL: func.func @forward
// B05-SAME: -> tensor<4xf32>
// B05-SAME: kiln.num_saved = 0 : i64, kiln.saved_bytes = 0 : i64
// B05-LABEL: func.func @backward
// B05-SAME: kiln.recompute_flops = 4768 : i64
//
// Budget 0: nothing but the primals is kept; backward recomputes both
// branches, each just before its first use (4768 FLOPs).
// B0-LABEL: func.func @forward
// B0-SAME: -> tensor<4xf32>
// B0-SAME: kiln.num_saved = 0 : i64, kiln.saved_bytes = 0 : i64
// B0-LABEL: func.func @backward
// B0-SAME: kiln.recompute_flops = 4768 : i64, kiln.recomputed = {kiln.exp = 1 : i64, kiln.matmul = 2 : i64, kiln.tanh = 1 : i64}
// B0: kiln.matmul %{{.*}}, %{{.*}} : tensor<4x2xf32>, tensor<2x32xf32>
// B0-NEXT: kiln.tanh
// B0: kiln.matmul %{{.*}}, %{{.*}} : tensor<2x4xf32>, tensor<4x32xf32>
// B0: kiln.matmul %{{.*}}, %{{.*}} : tensor<4x64xf32>, tensor<64x8xf32>
// B0-NEXT: kiln.exp
// B0: return
func.func @joint(%x: tensor<4x2xf32> {kiln.role = "primal"},
                 %wa: tensor<2x32xf32> {kiln.role = "primal"},
                 %x2: tensor<4x64xf32> {kiln.role = "primal"},
                 %wb: tensor<64x8xf32> {kiln.role = "primal"},
                 %g: tensor<4xf32> {kiln.role = "tangent"})
    -> (tensor<4xf32>, tensor<2x32xf32>, tensor<64x8xf32>)
    attributes {kiln.num_forward_outputs = 1 : i64} {
  %a = kiln.matmul %x, %wa : tensor<4x2xf32>, tensor<2x32xf32> -> tensor<4x32xf32>
  %ya = kiln.tanh %a : tensor<4x32xf32>
  %b = kiln.matmul %x2, %wb : tensor<4x64xf32>, tensor<64x8xf32> -> tensor<4x8xf32>
  %yb = kiln.exp %b : tensor<4x8xf32>
  %sa = kiln.reduce_sum %ya [1] : tensor<4x32xf32> -> tensor<4xf32>
  %sb = kiln.reduce_sum %yb [1] : tensor<4x8xf32> -> tensor<4xf32>
  %o = kiln.add %sa, %sb : tensor<4xf32>
  %g2 = kiln.reshape %g : tensor<4xf32> -> tensor<4x1xf32>
  %gya = kiln.broadcast %g2 : tensor<4x1xf32> -> tensor<4x32xf32>
  %one = kiln.constant 1.0 : tensor<4x32xf32>
  %ya2 = kiln.mul %ya, %ya : tensor<4x32xf32>
  %da = kiln.sub %one, %ya2 : tensor<4x32xf32>
  %ga = kiln.mul %gya, %da : tensor<4x32xf32>
  %xt = kiln.transpose %x [1, 0] : tensor<4x2xf32> -> tensor<2x4xf32>
  %gwa = kiln.matmul %xt, %ga : tensor<2x4xf32>, tensor<4x32xf32> -> tensor<2x32xf32>
  %gyb = kiln.broadcast %g2 : tensor<4x1xf32> -> tensor<4x8xf32>
  %gb = kiln.mul %gyb, %yb : tensor<4x8xf32>
  %x2t = kiln.transpose %x2 [1, 0] : tensor<4x64xf32> -> tensor<64x4xf32>
  %gwb = kiln.matmul %x2t, %gb : tensor<64x4xf32>, tensor<4x8xf32> -> tensor<64x8xf32>
  return %o, %gwa, %gwb : tensor<4xf32>, tensor<2x32xf32>, tensor<64x8xf32>
}
