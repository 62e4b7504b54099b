// codegen/GemmEpilogue.h - which kiln.fusion after a kiln.matmul is a GEMM
// epilogue a target's GEMM library can apply while it stores the product
// (cuBLASLt's CUBLASLT_EPILOGUE_BIAS / RELU_BIAS / GELU_BIAS /
// GELU_AUX_BIAS / DGELU / DGELU_BGRAD; private to codegen/, target-neutral:
// the target says whether it folds them, Target::gemmEpilogueKernel).
//
//   %mm = kiln.matmul %x, %wt : tensor<MxK>, tensor<KxN> -> tensor<MxN>
//   %bb = kiln.broadcast %b : tensor<N> -> tensor<MxN>
//   %y  = kiln.fusion "f"(%mm, %bb) { add; [relu | gelu "tanh" composite] }
// becomes one GEMM launch reading x, wt and b; the fusion's kernel and the
// matmul's own launch are not run. A training forward's fusion that also
// yields the pre-activation t (saved for backward) is GELU_AUX_BIAS; the
// backward fusion
//   %g = kiln.matmul %dy, %w : tensor<MxK>, tensor<KxN> -> tensor<MxN>
//   %d, %db = kiln.fusion "f"(%t, %g) { d = g * gelu'(t); db = reduce_sum d [0] }
// (autodiff of the composite, matched op by op) is DGELU_BGRAD (DGELU
// without the sum).
#pragma once

#include "mlir/Support/LogicalResult.h"

#include "kiln/codegen/Target.h"
#include "kiln/ir/KilnOps.h"

namespace kiln::codegen {

// GemmEpilogueKind (kiln/codegen/Target.h): Bias is t = matmul + bias[n];
// BiasRelu relu(t) (kiln.relu); BiasGelu gelu(t, "tanh") = t * sigmoid(2
// sqrt(2/pi) (t + 0.044715 t^3)), the composite nn::GELU("tanh") traces.

/// "bias", "bias+relu", "bias+gelu", "bias+gelu+aux", "dgelu", "dgelu+bgrad".
const char *gemmEpilogueName(GemmEpilogueKind kind);

/// True for the kinds whose third GEMM operand is the aux matrix [M, N]
/// (Dgelu, DgeluBgrad), not a bias vector [N].
bool readsGemmAux(GemmEpilogueKind kind);

/// A fusion that is a GEMM epilogue of its matmul operand.
struct GemmEpilogueMatch {
  ir::MatmulOp matmul; ///< 2-D f32 [M, K] x [K, N], read only by the fusion
  /// Bias kinds: the [N] value broadcast over the rows (the broadcast's
  /// input); Dgelu kinds: the pre-activation t [M, N] (the aux input).
  mlir::Value operand;
  GemmEpilogueKind kind;
  /// The fusion result the GEMM stores (D); with two results the other is
  /// the aux output t (BiasGeluAux) or the bias gradient [N] (DgeluBgrad).
  unsigned mainResult = 0;
};

/// Matches `fusion` when it has one result, f32 [M, N], computed by one of
/// the GemmEpilogueKind forms from t = add(matmul, broadcast(bias [N])) (in
/// either operand order), where the matmul is 2-D f32, its only user is this
/// fusion, and the broadcast is a kiln.broadcast of a rank-1 [N] value
/// outside the fusion. Fails (no diagnostic) for anything else: then the
/// fusion runs as its own kernel, never a wrong result. The GELU form is
/// matched op by op (structure and constants 0.044715, sqrt(2/pi), 2, 1, 0:
/// frontend/src/ops/fused_gelu.cpp's composite, as traced).
///
/// BiasGeluAux: the same GELU form, with two results {t, gelu(t)} in either
/// order (t is saved for backward). Dgelu / DgeluBgrad: a fusion of inputs
/// {t [M, N], g = matmul [M, N]} (g read only by it) yielding d = g *
/// gelu'(t), optionally with reduce_sum(d, [0]) : [N], where d's expression
/// is the one kiln's autodiff of the composite gives, compared as a
/// hash-consed DAG (add, mul commutative; constants to 12 digits).
mlir::FailureOr<GemmEpilogueMatch> matchGemmEpilogue(ir::FusionOp fusion);

} // namespace kiln::codegen
