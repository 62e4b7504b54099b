// GEMMs on a GPU through cuBLASLt (CudaBackend::gemm on a device that is not
// host-accessible). cuBLASLt is column-major; Kiln's views are row-major
// strided, so c = a x b (c row-major [M, N]) is computed as the
// column-major c^T [N, M] = b^T [N, K] x a^T [K, M] (the standard trick:
// a row-major matrix is its transpose in column-major order), each operand
// passed with CUBLAS_OP_N when its rows are dense (last stride 1) and with
// CUBLAS_OP_T when its columns are (first stride 1). plan_gemm() is that
// mapping alone, so it is unit-tested on a machine without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/runtime/TensorView.h"
#include "kiln/runtime/cuda/DeviceApi.h"

namespace kiln::runtime::cuda {

/// One operand of cublasLtMatmul: a column-major `rows` x `cols` matrix with
/// leading dimension `ld` (elements), used transposed when `transposed`
/// (CUBLASLT_MATMUL_DESC_TRANSA/B = CUBLAS_OP_T), `batch_stride` elements
/// apart per batch (CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET; 0: shared).
struct LtOperand {
  int64_t rows = 0, cols = 0, ld = 0;
  bool transposed = false;
  int64_t batch_stride = 0;
};

/// cublasLtMatmul's view of c = a x b: D = op(A) x op(B) with A := b's
/// operand, B := a's, D := c^T; m, n, k of the column-major product
/// (m = N, n = M, k = K). `batch` 1 for 2-D views.
struct GemmPlan {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  LtOperand a, b, d;
};

/// The plan for the row-major views a [M, K] (or [B, M, K]), b [K, N] (or
/// [B, K, N]) and contiguous c [M, N] (or [B, M, N]). Throws
/// std::invalid_argument, naming the operand and its strides, when a matrix
/// has neither a unit row stride nor a unit column stride (the caller
/// copies it contiguous first), or when the shapes do not chain.
GemmPlan plan_gemm(const TensorView &a, const TensorView &b, const TensorView &c);

/// The cuBLASLt GEMMs of one GPU: a handle and a 32 MiB workspace (what
/// PyTorch gives cuBLASLt on Hopper), made on first use with the device's
/// context current. Float32 runs with CUBLAS_COMPUTE_32F (PyTorch's default
/// "highest" float32 matmul precision: no TF32), float64 with 64F, bfloat16
/// and float16 with float32 accumulation (CUBLAS_COMPUTE_32F, float scale),
/// as torch.matmul does. Each call asks the heuristic for the best algorithm
/// given the operands' actual pointer alignments.
class CublasLtGemm {
public:
  explicit CublasLtGemm(DeviceApi &device);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm &) = delete;
  CublasLtGemm &operator=(const CublasLtGemm &) = delete;

  /// c = a x b (DeviceBackend::gemm's contract) ordered on `stream`. Throws
  /// CudaError naming the cuBLASLt call and its status, std::invalid_argument
  /// for an unsupported dtype or layout (plan_gemm).
  void run(const TensorView &a, const TensorView &b, const TensorView &c, StreamHandle stream);
  /// The same with a fused epilogue (CUBLASLT_MATMUL_DESC_EPILOGUE =
  /// `epilogue`, a cublasLtEpilogue_t value: 4 BIAS, 6 RELU_BIAS, 36
  /// GELU_BIAS) reading `bias` (N elements of c's dtype, device memory;
  /// CUBLASLT_MATMUL_DESC_BIAS_POINTER). In the column-major product the
  /// plan computes (D = c^T, N rows), cuBLASLt's per-row bias is c's
  /// per-column bias[n]. 2-D only: throws std::invalid_argument otherwise.
  ///
  /// Training epilogues (cublasLt.h, cublasLtEpilogue_t and
  /// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER / _AUX_LD):
  ///  - 164 GELU_AUX_BIAS: `bias` as above; `aux` (written) receives the
  ///    pre-GELU value t = a x b + bias, c = gelu(t);
  ///  - 192 DGELU: `aux` (read) is the saved t, c = (a x b) * gelu'(t);
  ///  - 208 DGELU_BGRAD: the same, and `bias` (written) receives the bias
  ///    gradient: the sum of D over its columns (D's rows count, N), i.e.
  ///    bgrad[n] = sum_m c[m, n].
  /// `aux` is an [M, N] row-major buffer of c's dtype: in the column-major
  /// product it is D's layout, N rows and AUX_LD = N, which cuBLASLt needs
  /// divisible by 8 (std::invalid_argument otherwise).
  void run_with_epilogue(const TensorView &a, const TensorView &b, const TensorView &c, int32_t epilogue,
                         const void *bias, StreamHandle stream, const void *aux = nullptr);

private:
  void ensure_handle();

  DeviceApi &device_;
  void *handle_ = nullptr;    ///< cublasLtHandle_t
  void *workspace_ = nullptr; ///< device memory
};

} // namespace kiln::runtime::cuda
