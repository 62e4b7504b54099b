// sgemm through oneDNN's dnnl_sgemm (row-major BLAS-like interface); gemm16
// (bfloat16 inputs) and gemm_bf16 through oneDNN's matmul primitive;
// gemm_f16 through sgemm.
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <dnnl.h>
#include <dnnl.hpp>

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

// ---- gemm16 ------------------------------------------------------------------

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

dnnl::engine &cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// A 16-bit operand as oneDNN sees it: its data and (row, col) strides.
/// Row- and column-major views are passed through; anything else (stride-0
/// broadcasts, sliced both ways) is copied row-major into `scratch`.
struct Operand16 {
  const uint16_t *data;
  int64_t row_stride, col_stride;
};

Operand16 describe16(const Matrix16View &m, std::vector<uint16_t> &scratch) {
  if (m.col_stride == 1 && (m.row_stride >= m.cols || m.rows == 1))
    return {m.data, m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.row_stride, 1};
  if (m.row_stride == 1 && (m.col_stride >= m.rows || m.cols == 1))
    return {m.data, 1, m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.col_stride};
  scratch.resize(static_cast<size_t>(m.rows * m.cols));
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) scratch[i * m.cols + j] = m.data[i * m.row_stride + j * m.col_stride];
  return {scratch.data(), std::max<int64_t>(m.cols, 1), 1};
}

/// One cached matmul primitive: the key is everything its descriptor
/// depends on (M, K, N, operand strides, ldc, dtypes).
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int>;
struct Cached {
  memory::desc a, b, c;
  dnnl::matmul primitive;
};

/// Primitive cache. Bounded: cleared when it reaches kMaxCached entries
/// (eager shapes repeat across training steps, so the set stays small).
constexpr size_t kMaxCached = 256;
std::mutex cache_mutex;
std::map<Key, std::shared_ptr<Cached>> cache;

std::shared_ptr<Cached> primitive_for(DType in, const Operand16 &a, const Operand16 &b, int64_t M, int64_t K,
                                      int64_t N, DType out, int64_t ldc) {
  const Key key{M, K, N, a.row_stride, a.col_stride, b.row_stride, b.col_stride, ldc, static_cast<int>(in),
                static_cast<int>(out)};
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto entry = std::make_shared<Cached>();
  try {
    entry->a = memory::desc({M, K}, dnnl_type(in), memory::dims{a.row_stride, a.col_stride});
    entry->b = memory::desc({K, N}, dnnl_type(in), memory::dims{b.row_stride, b.col_stride});
    entry->c = memory::desc({M, N}, dnnl_type(out), memory::dims{ldc, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(entry->a, entry->b, entry->c), cpu_engine());
    entry->primitive = dnnl::matmul(pd);
  } catch (const dnnl::error &e) {
    throw std::runtime_error(std::string("gemm16: oneDNN has no matmul for ") + dtype_name(in) + " x " +
                             dtype_name(in) + " -> " + dtype_name(out) + " on this CPU (" + e.what() + ")");
  }
  if (cache.size() >= kMaxCached) cache.clear();
  cache.emplace(key, entry);
  return entry;
}

bool probe16(DType in) {
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

bool gemm16_supported(DType in) {
  static const bool bf16 = probe16(DType::BFloat16);
  static const bool f16 = probe16(DType::Float16);
  if (in == DType::BFloat16) return bf16;
  if (in == DType::Float16) return f16;
  return false;
}

void gemm16(DType in, const Matrix16View &A, const Matrix16View &B, DType out, void *C, int64_t ldc) {
  if (in != DType::BFloat16 && in != DType::Float16)
    throw std::runtime_error(std::string("gemm16: inputs must be bfloat16 or float16, got ") + dtype_name(in));
  if (out != DType::Float32 && out != in)
    throw std::runtime_error(std::string("gemm16: output must be float32 or ") + dtype_name(in) + ", got " +
                             dtype_name(out));
  if (A.cols != B.rows)
    throw std::runtime_error("gemm16: inner sizes differ (" + std::to_string(A.cols) + " != " +
                             std::to_string(B.rows) + ")");
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  if (M == 0 || N == 0) return;
  if (K == 0) {  // sums of nothing; +0.0 has the all-zero bit pattern in all three types
    const size_t item = out == DType::Float32 ? 4 : 2;
    for (int64_t i = 0; i < M; ++i) std::memset(static_cast<char *>(C) + i * ldc * item, 0, N * item);
    return;
  }
  std::vector<uint16_t> sa, sb;
  Operand16 a = describe16(A, sa), b = describe16(B, sb);
  std::shared_ptr<Cached> p = primitive_for(in, a, b, M, K, N, out, ldc);
  thread_local dnnl::stream stream(cpu_engine());
  memory ma(p->a, cpu_engine(), const_cast<uint16_t *>(a.data));
  memory mb(p->b, cpu_engine(), const_cast<uint16_t *>(b.data));
  memory mc(p->c, cpu_engine(), C);
  p->primitive.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  stream.wait();
}

// ---- 16-bit float GEMMs ---------------------------------------------------------

namespace {

/// The batch of 16-bit operands as oneDNN sees it: a [batch, rows, cols]
/// tensor with strides {batch, row, col} where each matrix is a row- or
/// column-major view (the rule of sgemm's describe) and batch is 1 for a
/// shared (batch stride 0) matrix; otherwise a contiguous copy in `scratch`.
struct HalfOperand {
  const uint16_t *data;
  int64_t batch, batch_stride, row_stride, col_stride;
};

HalfOperand describe_half(const Matrix16View &m, int64_t batch, int64_t batch_stride,
                          std::vector<uint16_t> &scratch) {
  if (batch_stride == 0) batch = 1;
  // The stride of a batch dim of size 1 is never used; make it the matrix's
  // extent so the descriptor stays "dense" for oneDNN's kernels.
  const int64_t matrix = std::max<int64_t>({m.rows * m.cols, m.rows * m.row_stride, m.cols * m.col_stride, 1});
  if (m.col_stride == 1 && (m.row_stride >= m.cols || m.rows == 1))
    return {m.data, batch, batch == 1 ? matrix : batch_stride, m.rows == 1 ? std::max<int64_t>(m.cols, 1) : m.row_stride,
            1};
  if (m.row_stride == 1 && (m.col_stride >= m.rows || m.cols == 1))
    return {m.data, batch, batch == 1 ? matrix : batch_stride, 1,
            m.cols == 1 ? std::max<int64_t>(m.rows, 1) : m.col_stride};
  scratch.resize(static_cast<size_t>(batch * m.rows * m.cols));
  uint16_t *out = scratch.data();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < m.rows; ++i)
      for (int64_t j = 0; j < m.cols; ++j) *out++ = m.data[b * batch_stride + i * m.row_stride + j * m.col_stride];
  return {scratch.data(), batch, std::max<int64_t>(m.rows * m.cols, 1), std::max<int64_t>(m.cols, 1), 1};
}

/// One bf16 matmul primitive per (shapes, strides, dst type), kept per
/// thread: creating a primitive costs far more than running a small one.
using MatmulKey = std::array<int64_t, 16>;

struct BF16Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;
};

BF16Matmul &bf16_matmul(int64_t batch, int64_t M, int64_t N, int64_t K, const HalfOperand &a, const HalfOperand &b,
                        int64_t ldc, int64_t c_batch_stride, DType c_dtype) {
  thread_local std::map<MatmulKey, BF16Matmul> cache;
  const MatmulKey key{batch,        M,           N,          K,     a.batch, a.batch_stride, a.row_stride, a.col_stride,
                      b.batch,      b.batch_stride, b.row_stride, b.col_stride, ldc, c_batch_stride,
                      static_cast<int64_t>(c_dtype), 0};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::memory::desc da({a.batch, M, K}, dt::bf16, dims{a.batch_stride, a.row_stride, a.col_stride});
  dnnl::memory::desc db({b.batch, K, N}, dt::bf16, dims{b.batch_stride, b.row_stride, b.col_stride});
  dnnl::memory::desc dc({batch, M, N}, c_dtype == DType::BFloat16 ? dt::bf16 : dt::f32,
                        dims{batch == 1 ? std::max<int64_t>(M * ldc, 1) : c_batch_stride, ldc, 1});
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(da, db, dc), cpu_engine());
    return cache.emplace(key, BF16Matmul{dnnl::matmul(pd), da, db, dc}).first->second;
  } catch (const dnnl::error &e) {
    throw std::runtime_error(std::string("gemm_bf16: oneDNN has no bf16 matmul for ") + std::to_string(batch) +
                             " x [" + std::to_string(M) + ", " + std::to_string(K) + "] x [" + std::to_string(K) +
                             ", " + std::to_string(N) + "] on this CPU: " + e.what());
  }
}

float half_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

uint16_t float_to_half(float f) {
  _Float16 h = static_cast<_Float16>(f);  // round to nearest even
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

}  // namespace

void gemm_bf16(const Matrix16View &A, const Matrix16View &B, void *C, int64_t ldc, DType c_dtype) {
  gemm_bf16_batched(1, A, 0, B, 0, C, ldc, 0, c_dtype);
}

void gemm_bf16_batched(int64_t batch, const Matrix16View &A, int64_t a_batch_stride, const Matrix16View &B,
                       int64_t b_batch_stride, void *C, int64_t ldc, int64_t c_batch_stride, DType c_dtype) {
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  if (batch == 0 || M == 0 || N == 0) return;
  const size_t c_item = c_dtype == DType::BFloat16 ? 2 : 4;
  if (K == 0) {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < M; ++i)
        std::memset(static_cast<char *>(C) + (b * c_batch_stride + i * ldc) * c_item, 0, N * c_item);
    return;
  }
  std::vector<uint16_t> sa, sb;
  HalfOperand a = describe_half(A, batch, a_batch_stride, sa), b = describe_half(B, batch, b_batch_stride, sb);
  BF16Matmul &mm = bf16_matmul(batch, M, N, K, a, b, ldc, c_batch_stride, c_dtype);
  thread_local dnnl::stream stream(cpu_engine());
  dnnl::memory ma(mm.a, cpu_engine(), const_cast<uint16_t *>(a.data));
  dnnl::memory mb(mm.b, cpu_engine(), const_cast<uint16_t *>(b.data));
  dnnl::memory mc(mm.c, cpu_engine(), C);
  mm.primitive.execute(stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
  stream.wait();
}

void gemm_f16(const Matrix16View &A, const Matrix16View &B, uint16_t *C, int64_t ldc) {
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  if (M == 0 || N == 0) return;
  auto widen = [](const Matrix16View &m) {
    std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
    for (int64_t i = 0; i < m.rows; ++i)
      for (int64_t j = 0; j < m.cols; ++j) out[i * m.cols + j] = half_to_float(m.data[i * m.row_stride + j * m.col_stride]);
    return out;
  };
  std::vector<float> a = widen(A), b = widen(B), c(static_cast<size_t>(M * N));
  sgemm(MatrixView{a.data(), M, K, std::max<int64_t>(K, 1), 1}, MatrixView{b.data(), K, N, std::max<int64_t>(N, 1), 1},
        c.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = float_to_half(c[i * N + j]);
}

}  // namespace kiln::runtime
