// codegen/GemmEpilogue.h - which kiln.fusion after a kiln.matmul is a GEMM
// epilogue a target's GEMM library can apply while it stores the product
// (cuBLASLt's CUBLASLT_EPILOGUE_BIAS / RELU_BIAS / GELU_BIAS; private to
// codegen/, target-neutral: the target says whether it folds them,
// Target::gemmEpilogueKernel).
//
//   %mm = kiln.matmul %x, %wt : tensor<MxK>, tensor<KxN> -> tensor<MxN>
//   %bb = kiln.broadcast %b : tensor<N> -> tensor<MxN>
//   %y  = kiln.fusion "f"(%mm, %bb) { add; [relu | gelu "tanh" composite] }
// becomes one GEMM launch reading x, wt and b; the fusion's kernel and the
// matmul's own launch are not run.
#pragma once

#include "mlir/Support/LogicalResult.h"

#include "kiln/codegen/Target.h"
#include "kiln/ir/KilnOps.h"

namespace kiln::codegen {

// GemmEpilogueKind (kiln/codegen/Target.h): Bias is t = matmul + bias[n];
// BiasRelu relu(t) (kiln.relu); BiasGelu gelu(t, "tanh") = t * sigmoid(2
// sqrt(2/pi) (t + 0.044715 t^3)), the composite nn::GELU("tanh") traces.

/// "bias", "bias+relu", "bias+gelu".
const char *gemmEpilogueName(GemmEpilogueKind kind);

/// A fusion that is a GEMM epilogue of its matmul operand.
struct GemmEpilogueMatch {
  ir::MatmulOp matmul; ///< 2-D f32 [M, K] x [K, N], read only by the fusion
  mlir::Value bias;    ///< the [N] value broadcast over the rows (the broadcast's input)
  GemmEpilogueKind kind;
};

/// Matches `fusion` when it has one result, f32 [M, N], computed by one of
/// the GemmEpilogueKind forms from t = add(matmul, broadcast(bias [N])) (in
/// either operand order), where the matmul is 2-D f32, its only user is this
/// fusion, and the broadcast is a kiln.broadcast of a rank-1 [N] value
/// outside the fusion. Fails (no diagnostic) for anything else: then the
/// fusion runs as its own kernel, never a wrong result. The GELU form is
/// matched op by op (structure and constants 0.044715, sqrt(2/pi), 2, 1, 0:
/// frontend/src/ops/fused_gelu.cpp's composite, as traced).
mlir::FailureOr<GemmEpilogueMatch> matchGemmEpilogue(ir::FusionOp fusion);

} // namespace kiln::codegen
