// The float32 GEMMs of the runtime (sgemm, sgemm_batched: oneDNN matmul
// primitives, operands copied dense where oneDNN would run its BLAS-style
// gemm) and the float32 convolution forward (on oneDNN's own layouts),
// against double-precision references computed here, for every operand
// layout the compiled and eager callers pass: row- and column-major,
// neither (copied), a batch with the heads interleaved in a row (attention
// on a [B, T, H, D] tensor), a shared (stride 0) operand; sizes on both
// sides of cpu::kSerialMacs. Inputs are small integers, so products and
// sums are exact in float32 and the results must be equal.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "kiln/runtime/Conv.h"
#include "kiln/runtime/Gemm.h"

using namespace kiln;
using namespace kiln::runtime;

namespace {

/// Small integers (exact in float32, and so are their dot products here).
std::vector<float> integers(size_t n, std::mt19937 &rng) {
  std::uniform_int_distribution<int> dist(-3, 3);
  std::vector<float> v(n);
  for (float &x : v)
    x = static_cast<float>(dist(rng));
  return v;
}

/// C[i, j] = sum_k A(i, k) B(k, j) in double, from strided views.
std::vector<double> reference(const MatrixView &a, const MatrixView &b) {
  std::vector<double> c(a.rows * b.cols, 0.0);
  for (int64_t i = 0; i < a.rows; ++i)
    for (int64_t k = 0; k < a.cols; ++k)
      for (int64_t j = 0; j < b.cols; ++j)
        c[i * b.cols + j] +=
            double(a.data[i * a.row_stride + k * a.col_stride]) * b.data[k * b.row_stride + j * b.col_stride];
  return c;
}

/// A [rows, cols] view into `storage`: row-major, column-major, or with
/// every element 2 apart along both dims (neither contiguous).
enum class Layout { RowMajor, ColMajor, Strided };
MatrixView view_of(const std::vector<float> &storage, int64_t rows, int64_t cols, Layout layout) {
  switch (layout) {
  case Layout::RowMajor:
    return {storage.data(), rows, cols, cols, 1};
  case Layout::ColMajor:
    return {storage.data(), rows, cols, 1, rows};
  case Layout::Strided:
    return {storage.data(), rows, cols, 2 * cols * 2, 2};
  }
  return {};
}

int max_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

TEST(runtime_GemmF32, EveryLayoutSmallAndLarge) {
  std::mt19937 rng(3);
  const int threads = max_threads();
  // 16x24x8 runs on one thread, 160x96x200 (3.1M multiply-adds) on all.
  for (auto [M, K, N] : {std::array<int64_t, 3>{16, 24, 8}, std::array<int64_t, 3>{160, 96, 200}})
    for (Layout la : {Layout::RowMajor, Layout::ColMajor, Layout::Strided})
      for (Layout lb : {Layout::RowMajor, Layout::ColMajor, Layout::Strided}) {
        SCOPED_TRACE(testing::Message() << M << "x" << K << "x" << N << " layouts " << int(la) << ", " << int(lb));
        const std::vector<float> sa = integers(4 * M * K, rng), sb = integers(4 * K * N, rng);
        const MatrixView a = view_of(sa, M, K, la), b = view_of(sb, K, N, lb);
        const std::vector<double> ref = reference(a, b);
        // A dense C (brgemm matmul) and one with a leading dimension past N
        // (oneDNN runs that as gemm:jit).
        for (int64_t ldc : {N, N + 5}) {
          std::vector<float> c(M * ldc, -7.0f);
          sgemm(a, b, c.data(), ldc);
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j)
              ASSERT_EQ(c[i * ldc + j], ref[i * N + j]) << i << ", " << j;
            for (int64_t j = N; j < ldc; ++j)
              ASSERT_EQ(c[i * ldc + j], -7.0f) << "wrote past N in row " << i;
          }
          EXPECT_EQ(max_threads(), threads) << "the serial scope did not restore the thread count";
        }
      }
}

TEST(runtime_GemmF32, BatchWithInterleavedHeadsAndSharedOperands) {
  // q, k as [B, T, H, D] (row stride H*D, batch = one head: stride D): the
  // batched layout oneDNN's brgemm matmul does not take. scores[h] = q_h k_h^T.
  std::mt19937 rng(5);
  for (int64_t T : {int64_t(16), int64_t(128)}) {
    const int64_t H = 4, D = 32;
    SCOPED_TRACE(testing::Message() << "T " << T);
    const std::vector<float> q = integers(T * H * D, rng), k = integers(T * H * D, rng);
    const MatrixView qv{q.data(), T, D, H * D, 1}, kt{k.data(), D, T, 1, H * D};
    std::vector<float> scores(H * T * T, -1.0f);
    sgemm_batched(H, qv, D, kt, D, scores.data(), T, T * T);
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<double> ref = reference({q.data() + h * D, T, D, H * D, 1}, {k.data() + h * D, D, T, 1, H * D});
      for (int64_t i = 0; i < T * T; ++i)
        ASSERT_EQ(scores[h * T * T + i], ref[i]) << "head " << h << " at " << i;
    }
    // A shared B (batch stride 0), column-major.
    const std::vector<float> w = integers(D * 8, rng);
    const MatrixView wv{w.data(), D, 8, 1, D};
    std::vector<float> out(H * T * 8);
    sgemm_batched(H, qv, D, wv, 0, out.data(), 8, T * 8);
    for (int64_t h = 0; h < H; ++h) {
      const std::vector<double> ref = reference({q.data() + h * D, T, D, H * D, 1}, wv);
      for (int64_t i = 0; i < T * 8; ++i)
        ASSERT_EQ(out[h * T * 8 + i], ref[i]) << "head " << h << " at " << i;
    }
  }
}

TEST(runtime_GemmF32, ConvForwardOnOneDnnLayoutsMatchesDirectSum) {
  // The forward runs on oneDNN's layouts with reorders in and out (plain
  // nchw would be im2col + sgemm); grouped and strided too.
  std::mt19937 rng(7);
  struct Case {
    ConvShape s;
    Conv2dParams p;
  };
  Conv2dParams pad1;
  pad1.padding = {1, 1};
  Conv2dParams grouped;
  grouped.stride = {2, 2};
  grouped.groups = 4;
  const int threads = max_threads();
  for (const Case &c : {Case{{{2, 3, 9, 9}, {8, 3, 3, 3}, {2, 8, 9, 9}}, pad1},
                        Case{{{1, 16, 8, 8}, {16, 16, 3, 3}, {1, 16, 8, 8}}, pad1},
                        Case{{{3, 8, 7, 7}, {8, 2, 3, 3}, {3, 8, 3, 3}}, grouped}}) {
    const ConvShape &s = c.s;
    const std::vector<float> x = integers(s.input[0] * s.input[1] * s.input[2] * s.input[3], rng);
    const std::vector<float> w = integers(s.weight[0] * s.weight[1] * s.weight[2] * s.weight[3], rng);
    std::vector<float> y(s.output[0] * s.output[1] * s.output[2] * s.output[3]);
    conv2d(ConvOp::Forward, c.p, s, DType::Float32, x.data(), w.data(), y.data());
    const int64_t N = s.input[0], C = s.input[1], H = s.input[2], W = s.input[3], O = s.weight[0];
    const int64_t Cg = s.weight[1], kH = s.weight[2], kW = s.weight[3], OH = s.output[2], OW = s.output[3];
    const int64_t Og = O / c.p.groups;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double sum = 0.0;
            for (int64_t ci = 0; ci < Cg; ++ci)
              for (int64_t kh = 0; kh < kH; ++kh)
                for (int64_t kw = 0; kw < kW; ++kw) {
                  const int64_t ih = oh * c.p.stride[0] - c.p.padding[0] + kh;
                  const int64_t iw = ow * c.p.stride[1] - c.p.padding[1] + kw;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                    continue;
                  const int64_t cin = (o / Og) * Cg + ci;
                  sum += double(x[((n * C + cin) * H + ih) * W + iw]) * w[((o * Cg + ci) * kH + kh) * kW + kw];
                }
            ASSERT_EQ(y[((n * O + o) * OH + oh) * OW + ow], sum) << n << ", " << o << ", " << oh << ", " << ow;
          }
    EXPECT_EQ(max_threads(), threads);
  }
}

} // namespace
