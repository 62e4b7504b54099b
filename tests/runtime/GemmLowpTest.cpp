// The 16-bit float GEMMs of the runtime (gemm16 / gemm16_batched: bf16
// through a oneDNN matmul, f16 through sgemm) and bf16/f16 GEMM launches of a
// LaunchExecutable,
// against double-precision references computed here. Inputs are exactly
// representable in bf16/f16, so the products are exact and only the f32
// accumulation order (and, for 16-bit results, one rounding) differs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kiln/runtime/Gemm.h"
#include "kiln/runtime/LaunchExecutable.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {

/// float -> bfloat16 bits, round to nearest even (no NaNs here).
uint16_t toBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float fromBF16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t toF16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float fromF16(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

/// A [rows, cols] matrix stored row-major, column-major, or with every
/// element `gap` apart in both directions (neither dim contiguous: copied).
enum class Layout { RowMajor, ColMajor, Strided };

struct Matrix {
  std::vector<uint16_t> storage;
  Matrix16View view;
  std::vector<double> values; // row-major, exact
};

Matrix makeMatrix(int64_t rows, int64_t cols, Layout layout, bool bf16, std::mt19937 &rng) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  Matrix m;
  m.values.resize(rows * cols);
  int64_t rs = cols, cs = 1, size = rows * cols;
  if (layout == Layout::ColMajor)
    rs = 1, cs = rows;
  if (layout == Layout::Strided)
    rs = 3 * cols, cs = 3, size = 3 * rows * cols;
  m.storage.assign(size, 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      uint16_t bits = bf16 ? toBF16(dist(rng)) : toF16(dist(rng));
      m.storage[i * rs + j * cs] = bits;
      m.values[i * cols + j] = bf16 ? fromBF16(bits) : fromF16(bits);
    }
  m.view = Matrix16View{m.storage.data(), rows, cols, rs, cs};
  return m;
}

/// sum_k |a_ik b_kj|: the scale of the accumulation error of C[i, j].
void reference(const Matrix &a, const Matrix &b, int64_t M, int64_t K, int64_t N, std::vector<double> &c,
               std::vector<double> &scale) {
  c.assign(M * N, 0.0);
  scale.assign(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) {
        c[i * N + j] += a.values[i * K + k] * b.values[k * N + j];
        scale[i * N + j] += std::abs(a.values[i * K + k] * b.values[k * N + j]);
      }
}

TEST(runtime_GemmLowp, BF16AllLayoutsF32AndBF16Results) {
  const int64_t M = 37, K = 70, N = 19;
  std::mt19937 rng(7);
  for (Layout la : {Layout::RowMajor, Layout::ColMajor, Layout::Strided})
    for (Layout lb : {Layout::RowMajor, Layout::ColMajor, Layout::Strided}) {
      SCOPED_TRACE(testing::Message() << "layouts " << static_cast<int>(la) << " " << static_cast<int>(lb));
      Matrix a = makeMatrix(M, K, la, true, rng), b = makeMatrix(K, N, lb, true, rng);
      std::vector<double> ref, scale;
      reference(a, b, M, K, N, ref, scale);
      std::vector<float> c32(M * (N + 2), -1.0f); // ldc = N + 2: the padding stays untouched
      gemm16(DType::BFloat16, a.view, b.view, DType::Float32, c32.data(), N + 2);
      std::vector<uint16_t> c16(M * N);
      gemm16(DType::BFloat16, a.view, b.view, DType::BFloat16, c16.data(), N);
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          const double want = ref[i * N + j], tol = 1e-6 * scale[i * N + j];
          EXPECT_NEAR(c32[i * (N + 2) + j], want, tol) << i << "," << j;
          // bf16 result: the f32 sum rounded once (at most half an ulp, 2^-9 relative, plus the sum's error).
          EXPECT_NEAR(fromBF16(c16[i * N + j]), want, std::abs(want) * std::ldexp(1.0, -8) + tol) << i << "," << j;
        }
        EXPECT_EQ(c32[i * (N + 2) + N], -1.0f);
      }
    }
}

/// One batched call: A[i] column-major with a batch stride, B shared by
/// every i (batch stride 0) or strided (copied), C[i] with a padded batch
/// stride; against the per-matrix reference.
TEST(runtime_GemmLowp, BF16BatchedWithSharedAndStridedOperands) {
  const int64_t batch = 5, M = 33, K = 40, N = 17;
  std::mt19937 rng(9);
  for (Layout lb : {Layout::RowMajor, Layout::Strided})
    for (bool shared : {true, false}) {
      SCOPED_TRACE(testing::Message() << "B layout " << static_cast<int>(lb) << (shared ? " shared" : " per batch"));
      std::vector<Matrix> as, bs;
      for (int64_t i = 0; i < batch; ++i) {
        as.push_back(makeMatrix(M, K, Layout::ColMajor, true, rng));
        bs.push_back(makeMatrix(K, N, lb, true, rng));
      }
      // Pack the batch: A[i] / B[i] storage one after another.
      const int64_t sa = static_cast<int64_t>(as[0].storage.size()), sb = static_cast<int64_t>(bs[0].storage.size());
      std::vector<uint16_t> pa, pb;
      for (int64_t i = 0; i < batch; ++i) {
        pa.insert(pa.end(), as[i].storage.begin(), as[i].storage.end());
        pb.insert(pb.end(), bs[i].storage.begin(), bs[i].storage.end());
      }
      Matrix16View va = as[0].view, vb = bs[0].view;
      va.data = pa.data();
      vb.data = pb.data();
      const int64_t sc = M * N + 3;
      std::vector<float> c(batch * sc, -1.0f);
      gemm16_batched(DType::BFloat16, batch, va, sa, vb, shared ? 0 : sb, DType::Float32, c.data(), N, sc);
      for (int64_t i = 0; i < batch; ++i) {
        std::vector<double> ref, scale;
        reference(as[i], bs[shared ? 0 : i], M, K, N, ref, scale);
        for (int64_t k = 0; k < M * N; ++k)
          ASSERT_NEAR(c[i * sc + k], ref[k], 1e-6 * scale[k]) << "batch " << i << " element " << k;
        EXPECT_EQ(c[i * sc + M * N], -1.0f);
      }
    }
}

TEST(runtime_GemmLowp, F16ThroughF32) {
  const int64_t M = 9, K = 33, N = 5;
  std::mt19937 rng(8);
  Matrix a = makeMatrix(M, K, Layout::ColMajor, false, rng), b = makeMatrix(K, N, Layout::Strided, false, rng);
  std::vector<double> ref, scale;
  reference(a, b, M, K, N, ref, scale);
  std::vector<uint16_t> c(M * N);
  gemm16(DType::Float16, a.view, b.view, DType::Float16, c.data(), N);
  for (int64_t i = 0; i < M * N; ++i)
    EXPECT_NEAR(fromF16(c[i]), ref[i], std::abs(ref[i]) * std::ldexp(1.0, -11) + 1e-6 * scale[i]) << i;
}

TEST(runtime_GemmLowp, EmptyAndZeroK) {
  std::vector<uint16_t> a(6, toBF16(1.0f)), b(6, toBF16(1.0f));
  std::vector<float> c(4, 7.0f);
  gemm16(DType::BFloat16, Matrix16View{a.data(), 2, 0, 0, 1}, Matrix16View{b.data(), 0, 2, 2, 1}, DType::Float32, c.data(), 2);
  for (float v : c)
    EXPECT_EQ(v, 0.0f);
  gemm16(DType::BFloat16, Matrix16View{a.data(), 0, 3, 3, 1}, Matrix16View{b.data(), 3, 2, 2, 1}, DType::Float32, c.data(), 2);
  // Batched K == 0 with a 16-bit result: zeros in every C[i], the gaps
  // (ldc = 3, batch stride 7) untouched, for both dtypes.
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    std::vector<uint16_t> c16(14, 0x1234);
    gemm16_batched(dtype, 2, Matrix16View{a.data(), 2, 0, 0, 1}, 0, Matrix16View{b.data(), 0, 2, 2, 1}, 0, dtype,
                   c16.data(), 3, 7);
    for (int64_t i = 0; i < 14; ++i) {
      const bool written = i % 7 < 6 && i % 7 % 3 < 2;
      EXPECT_EQ(c16[i], written ? 0 : 0x1234) << dtype_name(dtype) << " element " << i;
    }
  }
}

/// Float16 batches (no oneDNN f16 matmul: through sgemm) with A shared by
/// every i (batch stride 0), B column-major per batch, f32 and f16 results
/// with padded rows and batches; against the per-matrix reference.
TEST(runtime_GemmLowp, F16BatchedThroughF32WithSharedOperand) {
  const int64_t batch = 3, M = 6, K = 21, N = 4, ldc = N + 1, sc = M * ldc + 2;
  std::mt19937 rng(11);
  Matrix a = makeMatrix(M, K, Layout::Strided, false, rng);
  std::vector<Matrix> bs;
  std::vector<uint16_t> pb;
  for (int64_t i = 0; i < batch; ++i) {
    bs.push_back(makeMatrix(K, N, Layout::ColMajor, false, rng));
    pb.insert(pb.end(), bs[i].storage.begin(), bs[i].storage.end());
  }
  Matrix16View vb = bs[0].view;
  vb.data = pb.data();
  std::vector<float> c32(batch * sc, -1.0f);
  std::vector<uint16_t> c16(batch * sc, 0xffff);
  gemm16_batched(DType::Float16, batch, a.view, 0, vb, K * N, DType::Float32, c32.data(), ldc, sc);
  gemm16_batched(DType::Float16, batch, a.view, 0, vb, K * N, DType::Float16, c16.data(), ldc, sc);
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<double> ref, scale;
    reference(a, bs[i], M, K, N, ref, scale);
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t j = 0; j < N; ++j) {
        const int64_t at = i * sc + r * ldc + j;
        const double want = ref[r * N + j], tol = 1e-6 * scale[r * N + j];
        EXPECT_NEAR(c32[at], want, tol) << "batch " << i << " (" << r << ", " << j << ")";
        EXPECT_NEAR(fromF16(c16[at]), want, std::abs(want) * std::ldexp(1.0, -11) + tol)
            << "batch " << i << " (" << r << ", " << j << ")";
      }
      EXPECT_EQ(c32[i * sc + r * ldc + N], -1.0f);
      EXPECT_EQ(c16[i * sc + r * ldc + N], 0xffff);
    }
  }
}

TEST(runtime_GemmLowp, BadArgumentsThrow) {
  uint16_t x = 0;
  float c = 0.0f;
  const Matrix16View one{&x, 1, 1, 1, 1};
  EXPECT_FALSE(gemm16_native(DType::Float32));
  // Float16 inputs with a bfloat16 result, a negative batch, float32 inputs.
  EXPECT_THROW(gemm16(DType::Float16, one, one, DType::BFloat16, &c, 1), std::runtime_error);
  EXPECT_THROW(gemm16_batched(DType::BFloat16, -1, one, 0, one, 0, DType::Float32, &c, 1, 1), std::runtime_error);
  EXPECT_THROW(gemm16_batched(DType::Float32, 1, one, 0, one, 0, DType::Float32, &c, 1, 1), std::runtime_error);
}

/// y[b] = x[b] x transpose(w[b]) and z[b] = x[b] x m (m broadcast over the
/// batch, stride 0) in bf16 and f16: small integers, so every product and
/// sum is exact and the 16-bit results must be exact too.
TEST(runtime_GemmLowp, BatchedLaunchWithTransposedAndBroadcastOperands) {
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    SCOPED_TRACE(dtype_name(dtype));
    LaunchExecutable::Builder builder;
    int x = builder.addInput({2, 2, 3}, dtype);
    int w = builder.addInput({2, 4, 3}, dtype);
    int m = builder.addInput({3, 4}, dtype);
    int y = builder.addGemm(x, builder.addTranspose(w, {0, 2, 1}));
    int z = builder.addGemm(x, builder.addBroadcast(m, {2, 3, 4}));
    ASSERT_GE(z, 0) << builder.error();
    EXPECT_EQ(builder.type(y).dtype, dtype);
    builder.setOutputs({y, z});
    std::string error;
    auto exe = builder.finish(&error);
    ASSERT_TRUE(exe) << error;
    auto encode = [&](float f) { return dtype == DType::BFloat16 ? toBF16(f) : toF16(f); };
    auto decode = [&](uint16_t u) { return dtype == DType::BFloat16 ? fromBF16(u) : fromF16(u); };
    std::vector<float> xs(12), ws(24), ms(12);
    for (int i = 0; i < 12; ++i)
      xs[i] = static_cast<float>(i % 5) - 2.0f, ms[i] = static_cast<float>(i % 7) - 3.0f;
    for (int i = 0; i < 24; ++i)
      ws[i] = static_cast<float>(i % 9) - 4.0f;
    auto make = [&](std::vector<int64_t> sizes, const std::vector<float> &values) {
      TensorView v;
      v.buffer = Buffer::make(values.size() * 2);
      auto *p = static_cast<uint16_t *>(v.buffer->data());
      for (size_t i = 0; i < values.size(); ++i)
        p[i] = encode(values[i]);
      v.sizes = std::move(sizes);
      v.strides = contiguous_strides(v.sizes);
      v.dtype = dtype;
      return v;
    };
    auto out = exe->run({make({2, 2, 3}, xs), make({2, 4, 3}, ws), make({3, 4}, ms)}, &error);
    ASSERT_EQ(out.size(), 2u) << error;
    EXPECT_EQ(out[0].dtype, dtype);
    const auto *py = static_cast<const uint16_t *>(out[0].data()), *pz = static_cast<const uint16_t *>(out[1].data());
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {
          float ry = 0, rz = 0;
          for (int k = 0; k < 3; ++k) {
            ry += xs[(s * 2 + i) * 3 + k] * ws[(s * 4 + j) * 3 + k];
            rz += xs[(s * 2 + i) * 3 + k] * ms[k * 4 + j];
          }
          EXPECT_EQ(decode(py[(s * 2 + i) * 4 + j]), ry);
          EXPECT_EQ(decode(pz[(s * 2 + i) * 4 + j]), rz);
        }
  }
}

TEST(runtime_GemmLowp, MixedDtypesAreRejected) {
  LaunchExecutable::Builder b;
  int x = b.addInput({4, 8}, DType::BFloat16);
  int w = b.addInput({8, 2}, DType::Float32);
  EXPECT_EQ(b.addGemm(x, w), -1);
  EXPECT_NE(b.error().find("of one dtype"), std::string::npos) << b.error();
}

} // namespace
