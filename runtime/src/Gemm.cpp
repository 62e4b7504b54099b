// sgemm through oneDNN's dnnl_sgemm (row-major BLAS-like interface).
#include <vector>

#include <dnnl.h>

#include "kiln/runtime/Gemm.h"

namespace kiln::runtime {
namespace {

/// Describes `m` as a row-major operand for dnnl_sgemm: 'N' with lda = row
/// stride if rows are contiguous, 'T' with lda = col stride if columns are.
/// Otherwise copies into `scratch` (row-major) and describes that.
struct Operand {
  char trans;
  const float *data;
  int64_t ld;
};

Operand describe(const MatrixView &m, std::vector<float> &scratch) {
  if (m.col_stride == 1 && (m.row_stride >= m.cols || m.rows == 1))
    return {'N', m.data, m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.row_stride};
  if (m.row_stride == 1 && (m.col_stride >= m.rows || m.cols == 1))
    return {'T', m.data, m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.col_stride};
  scratch.resize(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j)
      scratch[i * m.cols + j] = m.data[i * m.row_stride + j * m.col_stride];
  return {'N', scratch.data(), std::max<int64_t>(m.cols, 1)};
}

}  // namespace

void sgemm(const MatrixView &A, const MatrixView &B, float *C, int64_t ldc) {
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = 0.0f;
    return;
  }
  std::vector<float> sa, sb;
  Operand a = describe(A, sa), b = describe(B, sb);
  dnnl_sgemm(a.trans, b.trans, M, N, K, 1.0f, a.data, a.ld, b.data, b.ld, 0.0f, C, ldc);
}

}  // namespace kiln::runtime
