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

}  // namespace kiln::runtime
