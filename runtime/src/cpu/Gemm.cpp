// Every GEMM through one cached oneDNN matmul primitive per shape and
// layout: sgemm / sgemm_batched for float32, gemm16_batched (and gemm16)
// for bfloat16; float16 through float32. dnnl_sgemm is only the fallback
// where oneDNN has no matmul for the strides: its first call in a process
// generates all of its JIT kernels at once (36-45 ms here, whatever the
// shape), where creating a matmul primitive costs 0.01-0.5 ms per shape
// (bench/README.md, "Exported model": the first output of a fresh process).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <dnnl.h>
#include <dnnl.hpp>

#include "Half.h"
#include "OneDnn.h"
#include "kiln/runtime/Gemm.h"

namespace kiln::runtime {
namespace {

// ---- operand layouts (shared by sgemm and the 16-bit GEMMs) -----------------

/// How a GEMM kernel can read a strided [rows, cols] view in place:
/// row-major (columns contiguous, rows `ld` apart), column-major (rows
/// contiguous, columns `ld` apart), or not at all (Copy: the caller copies it
/// row-major first). A single row or column is contiguous either way; its
/// unused stride is replaced by a valid leading dimension.
struct Layout {
  enum Kind { RowMajor, ColMajor, Copy } kind;
  int64_t ld;
};

Layout layout_of(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (col_stride == 1 && (row_stride >= cols || rows == 1))
    return {Layout::RowMajor, rows == 1 ? std::max<int64_t>(cols, 1) : row_stride};
  if (row_stride == 1 && (col_stride >= rows || cols == 1))
    return {Layout::ColMajor, cols == 1 ? std::max<int64_t>(rows, 1) : col_stride};
  return {Layout::Copy, std::max<int64_t>(cols, 1)};
}

/// Copies the strided [rows, cols] matrix at `src` row-major to `dst`.
template <typename T>
void copy_row_major(const T *src, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, T *dst) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) *dst++ = src[i * row_stride + j * col_stride];
}

/// `m` as a dnnl_sgemm operand: 'N' with lda = row stride, 'T' with lda =
/// column stride, or a row-major copy in `scratch`.
struct Operand {
  char trans;
  const float *data;
  int64_t ld;
};

Operand describe(const MatrixView &m, std::vector<float> &scratch) {
  const Layout l = layout_of(m.rows, m.cols, m.row_stride, m.col_stride);
  if (l.kind == Layout::RowMajor) return {'N', m.data, l.ld};
  if (l.kind == Layout::ColMajor) return {'T', m.data, l.ld};
  scratch.resize(static_cast<size_t>(m.rows * m.cols));
  copy_row_major(m.data, m.rows, m.cols, m.row_stride, m.col_stride, scratch.data());
  return {'N', scratch.data(), l.ld};
}

/// A batch of GEMM operands (f32 or 16-bit) as oneDNN sees it: a [batch,
/// rows, cols] tensor with strides {batch_stride, row_stride, col_stride}.
/// Each matrix is passed in place when layout_of allows; batch is 1 for a
/// shared (batch stride 0) matrix; anything else is copied (contiguous, per
/// batch entry) into `scratch`.
struct Operand16 {
  const void *data;
  int64_t batch, batch_stride, row_stride, col_stride;
};

template <class View, class Element>
Operand16 dense_batch(const View &m, int64_t batch, int64_t batch_stride, std::vector<Element> &scratch);

/// A batch of matrices (`View`: MatrixView for f32, Matrix16View for 16-bit
/// floats) as oneDNN sees it: see Operand16.
template <class View, class Element>
Operand16 describe_batch(const View &m, int64_t batch, int64_t batch_stride, std::vector<Element> &scratch) {
  if (batch_stride == 0) batch = 1;
  // The stride of a batch dim of size 1 is never used; make it the matrix's
  // extent so the descriptor stays "dense" for oneDNN's kernels.
  const int64_t extent = std::max<int64_t>({m.rows * m.cols, m.rows * m.row_stride, m.cols * m.col_stride, 1});
  const Layout l = layout_of(m.rows, m.cols, m.row_stride, m.col_stride);
  if (l.kind == Layout::RowMajor) return {m.data, batch, batch == 1 ? extent : batch_stride, l.ld, 1};
  if (l.kind == Layout::ColMajor) return {m.data, batch, batch == 1 ? extent : batch_stride, 1, l.ld};
  return dense_batch(m, batch, batch_stride, scratch);
}

/// Every matrix of the batch copied row-major and back to back into
/// `scratch` (a broadcast operand repeated): the plainest layout oneDNN has.
template <class View, class Element>
Operand16 dense_batch(const View &m, int64_t batch, int64_t batch_stride, std::vector<Element> &scratch) {
  const int64_t size = m.rows * m.cols;
  scratch.resize(static_cast<size_t>(batch * size));
  for (int64_t b = 0; b < batch; ++b)
    copy_row_major(m.data + b * batch_stride, m.rows, m.cols, m.row_stride, m.col_stride, scratch.data() + b * size);
  return {scratch.data(), batch, std::max<int64_t>(size, 1), std::max<int64_t>(m.cols, 1), 1};
}

// ---- oneDNN matmul primitives (bfloat16) ----------------------------------

using dnnl::memory;

memory::data_type dnnl_type(DType t) {
  switch (t) {
  case DType::BFloat16: return memory::data_type::bf16;
  case DType::Float16: return memory::data_type::f16;
  case DType::Float32: return memory::data_type::f32;
  default: break;
  }
  throw std::runtime_error(std::string("gemm16: unsupported dtype ") + dtype_name(t));
}

using cpu::cpu_engine;

/// One cached matmul primitive: the key is everything its descriptors
/// depend on (batch, M, K, N, both operands' batch/strides, ldc, C's batch
/// stride, dtypes).
using Key = std::array<int64_t, 17>;
struct Cached {
  memory::desc a, b, c;
  dnnl::matmul primitive;
  /// oneDNN implemented it with its BLAS-style gemm (impl "gemm:jit", for
  /// strides its brgemm matmul does not take, e.g. attention heads
  /// interleaved in a row) or its reference loops: the first "gemm:jit"
  /// execution in a process generates all of dnnl_sgemm's kernels (36-43 ms
  /// here), so matmul_onednn copies such operands dense when that gives a
  /// brgemm primitive (a copy is O(batch*M*K), the product O(batch*M*K*N)).
  bool blas_or_ref = false;
  /// For a blas_or_ref entry: 1 when the dense copy's primitive is not
  /// blas_or_ref (then matmul_onednn copies), 0 when it is too (the operands
  /// then stay in place), -1 until the first call finds out.
  std::atomic<int> dense_is_better{-1};
};

/// The primitive cache. Bounded: cleared when it reaches kMaxCached entries
/// (shapes repeat across training steps, so the set stays small). Entries
/// are shared_ptrs so a clear never frees a primitive another thread runs.
constexpr size_t kMaxCached = 256;
std::mutex cache_mutex;
std::map<Key, std::shared_ptr<Cached>> cache;

using cpu::kSerialMacs;
using cpu::SerialScope;

bool serial_gemm(int64_t batch, int64_t M, int64_t K, int64_t N) {
  return batch * M < kSerialMacs && batch * M * N < kSerialMacs && batch * M * N * K < kSerialMacs;
}

/// The cached primitive for these descriptors, or null (with oneDNN's
/// reason in `why`) when oneDNN creates none for them.
std::shared_ptr<Cached> primitive_for(DType in, int64_t batch, int64_t M, int64_t K, int64_t N, const Operand16 &a,
                                      const Operand16 &b, DType out, int64_t ldc, int64_t c_batch_stride,
                                      std::string *why) {
  // A batch of 1 never reads C's batch stride; make it C's extent (dense).
  if (batch == 1) c_batch_stride = std::max<int64_t>(M * ldc, 1);
  const Key key{batch,        M,       K,       N,  a.batch,        a.batch_stride,         a.row_stride,
                a.col_stride, b.batch, b.batch_stride, b.row_stride, b.col_stride, ldc, c_batch_stride,
                static_cast<int64_t>(in), static_cast<int64_t>(out), 0};
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto entry = std::make_shared<Cached>();
  try {
    using dims = memory::dims;
    entry->a = memory::desc({a.batch, M, K}, dnnl_type(in), dims{a.batch_stride, a.row_stride, a.col_stride});
    entry->b = memory::desc({b.batch, K, N}, dnnl_type(in), dims{b.batch_stride, b.row_stride, b.col_stride});
    entry->c = memory::desc({batch, M, N}, dnnl_type(out), dims{c_batch_stride, ldc, 1});
    SerialScope serial(serial_gemm(batch, M, K, N));
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(entry->a, entry->b, entry->c), cpu_engine());
    entry->primitive = dnnl::matmul(pd);
    entry->blas_or_ref = cpu::blas_or_ref(pd.impl_info_str());
  } catch (const dnnl::error &e) {
    *why = e.what();
    return nullptr;
  }
  if (cache.size() >= kMaxCached) cache.clear();
  cache.emplace(key, entry);
  return entry;
}

bool probe_native(DType in) {
  if (in != DType::BFloat16 && in != DType::Float16) return false;
  try {
    const int64_t n = 16;
    memory::desc a({n, n}, dnnl_type(in), memory::dims{n, 1});
    memory::desc c({n, n}, memory::data_type::f32, memory::dims{n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), cpu_engine());
    return true;
  } catch (const dnnl::error &) {
    return false;
  }
}

/// The batch through one cached oneDNN matmul primitive (`View`:
/// MatrixView for f32 with `in` Float32, Matrix16View for 16-bit floats).
/// The operands are passed in place (describe_batch); when oneDNN has no
/// matmul for those strides (a broadcast, stride-0 operand with a
/// transposed layout, say), or only its BLAS-style or reference one
/// (Cached::blas_or_ref), they are copied dense (dense_batch) and tried
/// again. Returns false, with oneDNN's reason in `why`, when neither works.
template <class View>
bool matmul_onednn(DType in, int64_t batch, const View &A, int64_t a_batch_stride, const View &B,
                   int64_t b_batch_stride, DType out, void *C, int64_t ldc, int64_t c_batch_stride, std::string *why) {
  std::vector<std::remove_const_t<std::remove_pointer_t<decltype(A.data)>>> sa, sb;
  Operand16 a = describe_batch(A, batch, a_batch_stride, sa), b = describe_batch(B, batch, b_batch_stride, sb);
  std::shared_ptr<Cached> p = primitive_for(in, batch, A.rows, A.cols, B.cols, a, b, out, ldc, c_batch_stride, why);
  if (!p || (p->blas_or_ref && p->dense_is_better.load(std::memory_order_relaxed) != 0)) {
    a = dense_batch(A, batch, a_batch_stride, sa);
    b = dense_batch(B, batch, b_batch_stride, sb);
    std::shared_ptr<Cached> dense = primitive_for(in, batch, A.rows, A.cols, B.cols, a, b, out, ldc, c_batch_stride, why);
    if (p && (!dense || dense->blas_or_ref)) {  // no better: in place from now on
      p->dense_is_better.store(0, std::memory_order_relaxed);
      a = describe_batch(A, batch, a_batch_stride, sa);
      b = describe_batch(B, batch, b_batch_stride, sb);
    } else {
      if (p) p->dense_is_better.store(1, std::memory_order_relaxed);
      p = dense;
    }
  }
  if (!p) return false;
  thread_local dnnl::stream stream(cpu_engine());
  memory ma(p->a, cpu_engine(), const_cast<void *>(a.data));
  memory mb(p->b, cpu_engine(), const_cast<void *>(b.data));
  memory mc(p->c, cpu_engine(), C);
  SerialScope serial(serial_gemm(batch, A.rows, A.cols, B.cols));
  p->primitive.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  stream.wait();
  return true;
}

// ---- float16 through sgemm --------------------------------------------------

// half_to_float, float_to_half, bf16_to_float, float_to_bf16: Half.h.
using cpu::bf16_to_float;
using cpu::float_to_bf16;
using cpu::float_to_half;
using cpu::half_to_float;

/// Matrix `m` (`in` bits at `data`: Float16 or BFloat16) widened to a
/// row-major f32 copy in `out`.
void widen(DType in, const uint16_t *data, const Matrix16View &m, std::vector<float> &out) {
  out.resize(static_cast<size_t>(m.rows * m.cols));
  float *o = out.data();
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) {
      const uint16_t bits = data[i * m.row_stride + j * m.col_stride];
      *o++ = in == DType::BFloat16 ? bf16_to_float(bits) : half_to_float(bits);
    }
}

/// The batch as float32 sgemms, one per entry; a shared (stride 0) operand
/// is widened once.
void gemm16_via_sgemm(DType in, int64_t batch, const Matrix16View &A, int64_t a_batch_stride, const Matrix16View &B,
                      int64_t b_batch_stride, DType out, void *C, int64_t ldc, int64_t c_batch_stride) {
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  std::vector<float> a, b, c;
  for (int64_t i = 0; i < batch; ++i) {
    if (i == 0 || a_batch_stride != 0) widen(in, A.data + i * a_batch_stride, A, a);
    if (i == 0 || b_batch_stride != 0) widen(in, B.data + i * b_batch_stride, B, b);
    const MatrixView va{a.data(), M, K, K, 1}, vb{b.data(), K, N, N, 1};
    if (out == DType::Float32) {
      sgemm(va, vb, static_cast<float *>(C) + i * c_batch_stride, ldc);
      continue;
    }
    c.resize(static_cast<size_t>(M * N));
    sgemm(va, vb, c.data(), N);
    uint16_t *ci = static_cast<uint16_t *>(C) + i * c_batch_stride;
    for (int64_t r = 0; r < M; ++r)
      for (int64_t j = 0; j < N; ++j)
        ci[r * ldc + j] = in == DType::BFloat16 ? float_to_bf16(c[r * N + j]) : float_to_half(c[r * N + j]);
  }
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
  std::string why;
  if (matmul_onednn(DType::Float32, 1, A, 0, B, 0, DType::Float32, C, ldc, 0, &why)) return;
  std::vector<float> sa, sb;  // no oneDNN matmul for these strides
  Operand a = describe(A, sa), b = describe(B, sb);
  dnnl_sgemm(a.trans, b.trans, M, N, K, 1.0f, a.data, a.ld, b.data, b.ld, 0.0f, C, ldc);
}

void sgemm_batched(int64_t batch, const MatrixView &A, int64_t a_batch_stride, const MatrixView &B,
                   int64_t b_batch_stride, float *C, int64_t ldc, int64_t c_batch_stride) {
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  if (batch <= 0 || M == 0 || N == 0) return;
  if (batch == 1 || K == 0) {
    for (int64_t i = 0; i < batch; ++i)
      sgemm({A.data + i * a_batch_stride, M, K, A.row_stride, A.col_stride},
            {B.data + i * b_batch_stride, K, N, B.row_stride, B.col_stride}, C + i * c_batch_stride, ldc);
    return;
  }
  std::string why;
  if (matmul_onednn(DType::Float32, batch, A, a_batch_stride, B, b_batch_stride, DType::Float32, C, ldc,
                    c_batch_stride, &why))
    return;
  for (int64_t i = 0; i < batch; ++i)  // no oneDNN matmul for this batch: one sgemm per entry
    sgemm({A.data + i * a_batch_stride, M, K, A.row_stride, A.col_stride},
          {B.data + i * b_batch_stride, K, N, B.row_stride, B.col_stride}, C + i * c_batch_stride, ldc);
}

bool gemm16_native(DType in) {
  static const bool bf16 = probe_native(DType::BFloat16);
  static const bool f16 = probe_native(DType::Float16);
  if (in == DType::BFloat16) return bf16;
  if (in == DType::Float16) return f16;
  return false;
}

void gemm16_batched(DType in, int64_t batch, const Matrix16View &A, int64_t a_batch_stride, const Matrix16View &B,
                    int64_t b_batch_stride, DType out, void *C, int64_t ldc, int64_t c_batch_stride) {
  if (in != DType::BFloat16 && in != DType::Float16)
    throw std::runtime_error(std::string("gemm16: inputs must be bfloat16 or float16, got ") + dtype_name(in));
  if (out != DType::Float32 && out != in)
    throw std::runtime_error(std::string("gemm16: output must be float32 or ") + dtype_name(in) + ", got " +
                             dtype_name(out));
  if (A.cols != B.rows)
    throw std::runtime_error("gemm16: inner sizes differ (" + std::to_string(A.cols) + " != " +
                             std::to_string(B.rows) + ")");
  if (batch < 0) throw std::runtime_error("gemm16: batch must be >= 0, got " + std::to_string(batch));
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  if (batch == 0 || M == 0 || N == 0) return;
  if (K == 0) {  // sums of nothing; +0.0 has the all-zero bit pattern in all three types
    const size_t item = out == DType::Float32 ? 4 : 2;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < M; ++i)
        std::memset(static_cast<char *>(C) + (b * c_batch_stride + i * ldc) * item, 0, N * item);
    return;
  }
  std::string why;
  if (gemm16_native(in) && matmul_onednn(in, batch, A, a_batch_stride, B, b_batch_stride, out, C, ldc, c_batch_stride, &why))
    return;
  // No oneDNN matmul (float16, or these strides): float32 sgemms, same sums.
  gemm16_via_sgemm(in, batch, A, a_batch_stride, B, b_batch_stride, out, C, ldc, c_batch_stride);
}

void gemm16(DType in, const Matrix16View &A, const Matrix16View &B, DType out, void *C, int64_t ldc) {
  gemm16_batched(in, 1, A, 0, B, 0, out, C, ldc, 0);
}

}  // namespace kiln::runtime
