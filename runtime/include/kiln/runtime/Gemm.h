// kiln/runtime/Gemm.h - dense matrix multiply on the CPU through oneDNN.
#pragma once

#include <cstdint>

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

}  // namespace kiln::runtime
