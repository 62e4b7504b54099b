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
/// Uses oneDNN's dnnl_sgemm (which picks AVX-512/AMX kernels for this CPU).
/// Precondition (checked by callers): A.cols == B.rows.
void sgemm(const MatrixView &A, const MatrixView &B, float *C, int64_t ldc);

// ---- 16-bit float GEMMs (eager bf16 and autocast) ----------------------------

/// A strided 2-D view of 16-bit floats (bfloat16 or IEEE half bit
/// patterns): element (i, j) is data[i*row_stride + j*col_stride].
struct Matrix16View {
  const uint16_t *data;
  int64_t rows, cols;
  int64_t row_stride, col_stride;  ///< in elements
};

/// Whether gemm16 can multiply `in`-typed operands on this CPU: true when
/// oneDNN (2.6) creates a matmul primitive for them. BFloat16: yes (AMX-BF16
/// or AVX512-BF16 kernels where the CPU has them, oneDNN's emulation on
/// plain AVX-512). Float16: no with oneDNN 2.6 on CPU (it has no f16
/// matmul; callers convert to float32 and use sgemm). Any other dtype:
/// false. Probed once per dtype and cached.
bool gemm16_supported(DType in);

/// C[M, N] = A[M, K] x B[K, N] with A and B of dtype `in` (16-bit floats),
/// accumulated in float32 by oneDNN's matmul primitive; C has dtype `out`
/// (Float32, or `in`: the float32 sum rounded once, to nearest even) and
/// is row-major with leading dimension `ldc` (elements). A and B may be
/// row- or column-major views (passed to oneDNN as strided memory
/// descriptors); any other layout is copied first. Primitives are cached
/// per (shape, layout, dtypes), so repeated shapes skip oneDNN's ~30 us
/// primitive creation. Thread-safe.
/// Preconditions (checked by callers): A.cols == B.rows,
/// gemm16_supported(in), out is Float32 or `in`. Throws std::runtime_error
/// (with oneDNN's message) when they do not hold.
void gemm16(DType in, const Matrix16View &A, const Matrix16View &B, DType out, void *C, int64_t ldc);
/// C[M, N] = A[M, K] x B[K, N] with bfloat16 A and B, products accumulated in
/// f32, C contiguous row-major with leading dimension `ldc` (elements) of
/// `c_dtype` Float32 (unrounded) or BFloat16 (rounded once, to nearest even).
/// Through a oneDNN matmul primitive (AMX / AVX512-BF16 brgemm kernels on CPUs
/// that have them, a reference kernel otherwise); primitives are cached per
/// thread by shape, strides and dtypes. A and B may be row- or column-major
/// views (a transposed operand costs nothing); any other layout is copied first.
/// Precondition (checked by callers): A.cols == B.rows, c_dtype is Float32 or
/// BFloat16. Throws std::runtime_error if oneDNN has no implementation.
void gemm_bf16(const Matrix16View &A, const Matrix16View &B, void *C, int64_t ldc, DType c_dtype);

/// gemm_bf16 over a batch in one oneDNN primitive (a loop of 2-D calls is
/// ~8x slower on attention-sized matrices here): C[i] = A[i] x B[i] for
/// i < batch, where A[i] starts `a_batch_stride` elements after A[i - 1]
/// (0: one A for every i, a broadcast), the same for B, and C[i] starts
/// `c_batch_stride` elements after C[i - 1] (C[i] contiguous rows, `ldc`).
void gemm_bf16_batched(int64_t batch, const Matrix16View &A, int64_t a_batch_stride, const Matrix16View &B,
                       int64_t b_batch_stride, void *C, int64_t ldc, int64_t c_batch_stride, DType c_dtype);

/// C[M, N] = A[M, K] x B[K, N] with IEEE float16 A, B and C (C contiguous,
/// leading dimension `ldc`). oneDNN 2.6 has no f16 matmul on CPUs (not even
/// with AVX512-FP16), so A and B are widened to f32 (exact), multiplied by
/// sgemm, and C is rounded once to f16 (nearest even): the result PyTorch's
/// CPU f16 matmul gives, at f32 speed plus two conversions.
void gemm_f16(const Matrix16View &A, const Matrix16View &B, uint16_t *C, int64_t ldc);

}  // namespace kiln::runtime
