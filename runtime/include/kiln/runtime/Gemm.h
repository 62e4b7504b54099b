// kiln/runtime/Gemm.h - dense matrix multiply on the CPU through oneDNN.
#pragma once

#include <cstdint>

#include "kiln/runtime/DType.h"

namespace kiln::runtime {

/// A strided 2-D f32 matrix view: element (i, j) is data[i*row_stride + j*col_stride].
struct MatrixView {
  const float *data;
  int64_t rows, cols;
  int64_t row_stride, col_stride;  ///< in elements
};

/// C[M, N] = A[M, K] x B[K, N], f32, C contiguous row-major with leading
/// dimension `ldc` (elements). A and B may be row- or column-major views (a
/// transposed operand costs nothing); any other layout is copied first.
/// Runs one cached oneDNN matmul primitive per shape and layout (its JIT
/// picks AVX-512/AMX kernels for this CPU; below 2^21 multiply-adds on the
/// calling thread alone); dnnl_sgemm only where oneDNN has no matmul for
/// the strides.
/// Precondition (checked by callers): A.cols == B.rows.
void sgemm(const MatrixView &A, const MatrixView &B, float *C, int64_t ldc);

/// Batched f32 GEMM: C[i] = A[i] x B[i] for i < batch (A[i] [M, K], B[i]
/// [K, N], C[i] [M, N] row-major with leading dimension `ldc`), A[i] and
/// B[i] `a_batch_stride` / `b_batch_stride` elements after A[i-1] / B[i-1]
/// (0: one matrix for every i), C[i] `c_batch_stride` after C[i-1]; each
/// matrix row- or column-major (else copied first). One oneDNN matmul
/// primitive for the whole batch (cached by shape and strides, as
/// gemm16_batched's), which spreads the batch over the threads: a
/// [64 x 64 x 32] attention batch in one call instead of 64 sgemm calls;
/// batch 1 is sgemm. Strides oneDNN has no matmul for are copied dense and
/// tried again, then run as one sgemm per entry. Precondition: A.cols == B.rows.
void sgemm_batched(int64_t batch, const MatrixView &A, int64_t a_batch_stride, const MatrixView &B,
                   int64_t b_batch_stride, float *C, int64_t ldc, int64_t c_batch_stride);

// ---- 16-bit float GEMMs (eager bf16 matmul/bmm, compiled bf16/f16 GEMMs) ------
//
// One implementation: gemm16_batched. bfloat16 runs on oneDNN's matmul
// primitive (one primitive cache, one operand-layout rule); float16 runs on
// sgemm in float32, because oneDNN 2.6 has no CPU f16 matmul. gemm16 is the
// single-matrix case.

/// A strided 2-D view of 16-bit floats (bfloat16 or IEEE half bit
/// patterns): element (i, j) is data[i*row_stride + j*col_stride].
struct Matrix16View {
  const uint16_t *data;
  int64_t rows, cols;
  int64_t row_stride, col_stride;  ///< in elements
};

/// Whether gemm16/gemm16_batched multiply `in`-typed operands natively on a
/// oneDNN matmul primitive (float32 accumulation) on this CPU. BFloat16: yes
/// with oneDNN 2.6 (AMX-BF16 or AVX512-BF16 kernels where the CPU has them,
/// oneDNN's emulation on plain AVX-512). Float16: no with oneDNN 2.6 on CPU
/// (not even with AVX512-FP16); gemm16 still accepts it and computes through
/// sgemm in float32, and eager matmul converts to float32 itself. Any other
/// dtype: false. Probed once per dtype (a 16x16 primitive) and cached.
bool gemm16_native(DType in);

/// Batched 16-bit GEMM: C[i] = A[i] x B[i] for i < batch, each A[i] [M, K],
/// B[i] [K, N], C[i] [M, N], with A and B of dtype `in` (BFloat16 or
/// Float16) and C of dtype `out` (Float32, or `in`: the float32 sum rounded
/// once, to nearest even).
///  - Layout: A[i] starts `a_batch_stride` elements after A[i-1] (0: one A
///    broadcast to every i; the same for B); each matrix may be a row- or
///    column-major view (a transposed operand costs nothing, passed as a
///    strided memory descriptor); any other layout is copied first. C[i]
///    starts `c_batch_stride` elements after C[i-1] and is row-major with
///    leading dimension `ldc` (elements); C's other elements are untouched.
///    All strides are in elements.
///  - K == 0 writes zeros (sums of nothing); batch, M or N == 0 does nothing.
///  - BFloat16 (gemm16_native): one oneDNN 2.6 matmul primitive for the whole
///    batch (a loop of 2-D calls is ~8x slower on attention-sized matrices),
///    float32 accumulation. Primitives are cached by (batch, shapes, strides,
///    dtypes) in one process-wide cache (cleared at 256 entries), so repeated
///    shapes skip oneDNN's ~20-30 us primitive creation. Thread-safe.
///  - Float16 without a native matmul: A and B widened to float32 (exact),
///    multiplied by sgemm per batch entry, C rounded once to float16 (nearest
///    even) when out is Float16: the result PyTorch's CPU f16 matmul gives
///    (float32 accumulation, one rounding), at f32 speed plus two conversions.
///  - Any strides run: when oneDNN creates no matmul for the layouts (a
///    broadcast, transposed operand, say), the operands are copied dense and
///    tried again, and without any oneDNN matmul the batch goes through
///    float32 sgemms (the same float32 sums, one rounding).
/// Throws std::runtime_error naming the bad value when `in` is not BFloat16
/// or Float16, `out` is neither Float32 nor `in`, A.cols != B.rows, or batch
/// < 0 (callers turn it into kiln::Error or a launch error).
void gemm16_batched(DType in, int64_t batch, const Matrix16View &A, int64_t a_batch_stride, const Matrix16View &B,
                    int64_t b_batch_stride, DType out, void *C, int64_t ldc, int64_t c_batch_stride);

/// C[M, N] = A[M, K] x B[K, N]: gemm16_batched with batch 1 (same dtypes,
/// layouts, rounding, K == 0 zeros and errors). A and B of dtype `in`
/// (BFloat16 or Float16), C of dtype `out` (Float32 or `in`), row-major with
/// leading dimension `ldc` (elements).
void gemm16(DType in, const Matrix16View &A, const Matrix16View &B, DType out, void *C, int64_t ldc);

}  // namespace kiln::runtime
