// Reduction kernels on the CUDA-on-CPU simulator against the same fusion on
// the CPU target (SimRunForTests.h): softmax, log_softmax and layer_norm and
// their backwards as kiln-fuse makes them from the dialect ops (the
// frontend's decompositions, tests/lit/passes/fuse-rows.mlir), at warp-row
// and block-row lengths, rows not a multiple of 32, one-row and one-element
// cases; column and full sums (the same bits under different thread
// orders); argmax/argmin indices; a shape-generic row kernel at two sizes.
#include "FuseForTests.h"
#include "SimRunForTests.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/runtime/sim/Grid.h"

namespace {

using kiln::test::HostTensor;
using kiln::test::runSimCase;
using kiln::test::SimCase;
using kiln::test::SimCaseRun;
using kiln::test::substitute;
using Args = std::vector<HostTensor>;
using Values = std::vector<std::pair<std::string, std::string>>;

/// "R" rows and "N" columns, "T" the type; "INVN" 1/N (exact for N a power of 2).
Values rows(int64_t r, int64_t n, const char *type = "f32") {
  char inv[64];
  std::snprintf(inv, sizeof inv, "%.17e", 1.0 / static_cast<double>(n)); // a float literal, also for n = 1
  return {{"R", std::to_string(r)}, {"N", std::to_string(n)}, {"T", type}, {"INVN", inv}};
}

/// The row shapes every row fusion runs at: a warp per row (short rows, a
/// row not a multiple of 32, one element, the 1024 limit) and a block per
/// row (longer, not a multiple of the block). At 1x1 kiln-fuse makes no
/// row fusion (fusion 0 is the max alone): a one-element warp row.
const std::pair<int64_t, int64_t> kRowShapes[] = {{4, 8}, {20, 37}, {1, 300}, {1, 1}, {3, 1024}, {3, 1500}, {1, 4099}};

const char *const kSoftmax = R"(
func.func @softmax(%a: tensor<@R@x@N@x@T@>) -> tensor<@R@x@N@x@T@> {
  %m = kiln.reduce_max %a [1] : tensor<@R@x@N@x@T@> -> tensor<@R@x@T@>
  %mr = kiln.reshape %m : tensor<@R@x@T@> -> tensor<@R@x1x@T@>
  %mb = kiln.broadcast %mr : tensor<@R@x1x@T@> -> tensor<@R@x@N@x@T@>
  %0 = kiln.sub %a, %mb : tensor<@R@x@N@x@T@>
  %1 = kiln.exp %0 : tensor<@R@x@N@x@T@>
  %s = kiln.reduce_sum %1 [1] : tensor<@R@x@N@x@T@> -> tensor<@R@x@T@>
  %sr = kiln.reshape %s : tensor<@R@x@T@> -> tensor<@R@x1x@T@>
  %sb = kiln.broadcast %sr : tensor<@R@x1x@T@> -> tensor<@R@x@N@x@T@>
  %2 = kiln.div %1, %sb : tensor<@R@x@N@x@T@>
  return %2 : tensor<@R@x@N@x@T@>
})";

TEST(CudaSimRows, SoftmaxWarpAndBlockRows) {
  for (auto [r, n] : kRowShapes) {
    SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(n));
    SimCaseRun run = runSimCase(substitute(kSoftmax, rows(r, n)));
    EXPECT_EQ(kiln::codegen::cuda::kindName(run.kernel.launch.kind), std::string(n <= 1024 ? "warp-rows" : "block-rows"));
    // Every row sums to 1 (when fusion 0 is the whole softmax).
    const bool whole = !run.sim.results.empty() && run.sim.results[0].numel() == r * n && n > 1;
    for (int64_t i = 0; i < r && whole; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j)
        sum += run.sim.results[0].at(i * n + j);
      EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << i;
    }
  }
}

TEST(CudaSimRows, SoftmaxInFloat64) {
  runSimCase(substitute(kSoftmax, rows(3, 70, "f64")));
  runSimCase(substitute(kSoftmax, rows(2, 1100, "f64")));
}

TEST(CudaSimRows, SoftmaxOfBf16ThroughF32) {
  const char *text = R"(
func.func @softmax_bf16(%ab: tensor<@R@x@N@xbf16>) -> tensor<@R@x@N@xbf16> {
  %a = kiln.convert %ab : tensor<@R@x@N@xbf16> -> tensor<@R@x@N@xf32>
  %m = kiln.reduce_max %a [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %mr = kiln.reshape %m : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %mb = kiln.broadcast %mr : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %0 = kiln.sub %a, %mb : tensor<@R@x@N@xf32>
  %1 = kiln.exp %0 : tensor<@R@x@N@xf32>
  %s = kiln.reduce_sum %1 [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %sr = kiln.reshape %s : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %sb = kiln.broadcast %sr : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %2 = kiln.div %1, %sb : tensor<@R@x@N@xf32>
  %3 = kiln.convert %2 : tensor<@R@x@N@xf32> -> tensor<@R@x@N@xbf16>
  return %3 : tensor<@R@x@N@xbf16>
})";
  runSimCase(substitute(text, rows(6, 77)));
  runSimCase(substitute(text, rows(2, 2050)));
}

TEST(CudaSimRows, SoftmaxOfATransposedOperand) {
  runSimCase(R"(
func.func @softmax_t(%x: tensor<37x5xf32>) -> tensor<5x37xf32> {
  %a = kiln.transpose %x [1, 0] : tensor<37x5xf32> -> tensor<5x37xf32>
  %m = kiln.reduce_max %a [1] : tensor<5x37xf32> -> tensor<5xf32>
  %mr = kiln.reshape %m : tensor<5xf32> -> tensor<5x1xf32>
  %mb = kiln.broadcast %mr : tensor<5x1xf32> -> tensor<5x37xf32>
  %0 = kiln.sub %a, %mb : tensor<5x37xf32>
  %1 = kiln.exp %0 : tensor<5x37xf32>
  %s = kiln.reduce_sum %1 [1] : tensor<5x37xf32> -> tensor<5xf32>
  %sr = kiln.reshape %s : tensor<5xf32> -> tensor<5x1xf32>
  %sb = kiln.broadcast %sr : tensor<5x1xf32> -> tensor<5x37xf32>
  %2 = kiln.div %1, %sb : tensor<5x37xf32>
  return %2 : tensor<5x37xf32>
})");
}

TEST(CudaSimRows, LogSoftmax) {
  const char *text = R"(
func.func @log_softmax(%a: tensor<@R@x@N@xf32>) -> tensor<@R@x@N@xf32> {
  %m = kiln.reduce_max %a [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %mr = kiln.reshape %m : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %mb = kiln.broadcast %mr : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %0 = kiln.sub %a, %mb : tensor<@R@x@N@xf32>
  %1 = kiln.exp %0 : tensor<@R@x@N@xf32>
  %s = kiln.reduce_sum %1 [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %l = kiln.log %s : tensor<@R@xf32>
  %lr = kiln.reshape %l : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %lb = kiln.broadcast %lr : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %2 = kiln.sub %0, %lb : tensor<@R@x@N@xf32>
  return %2 : tensor<@R@x@N@xf32>
})";
  for (auto [r, n] : kRowShapes) {
    SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(n));
    runSimCase(substitute(text, rows(r, n)));
  }
}

// softmax_backward_composite (frontend/src/ops/fused_softmax.cpp):
// y * (g - sum(g * y)) and, for log_softmax, g - exp(y) * sum(g).
TEST(CudaSimRows, SoftmaxAndLogSoftmaxBackward) {
  const char *softmax = R"(
func.func @softmax_bw(%g: tensor<@R@x@N@xf32>, %y: tensor<@R@x@N@xf32>) -> tensor<@R@x@N@xf32> {
  %0 = kiln.mul %g, %y : tensor<@R@x@N@xf32>
  %s = kiln.reduce_sum %0 [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %sr = kiln.reshape %s : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %sb = kiln.broadcast %sr : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %1 = kiln.sub %g, %sb : tensor<@R@x@N@xf32>
  %2 = kiln.mul %y, %1 : tensor<@R@x@N@xf32>
  return %2 : tensor<@R@x@N@xf32>
})";
  const char *logSoftmax = R"(
func.func @log_softmax_bw(%g: tensor<@R@x@N@xf32>, %y: tensor<@R@x@N@xf32>) -> tensor<@R@x@N@xf32> {
  %s = kiln.reduce_sum %g [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %sr = kiln.reshape %s : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %sb = kiln.broadcast %sr : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %e = kiln.exp %y : tensor<@R@x@N@xf32>
  %0 = kiln.mul %e, %sb : tensor<@R@x@N@xf32>
  %1 = kiln.sub %g, %0 : tensor<@R@x@N@xf32>
  return %1 : tensor<@R@x@N@xf32>
})";
  for (auto [r, n] : {std::pair<int64_t, int64_t>{21, 37}, {1, 1}, {2, 1500}}) {
    SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(n));
    runSimCase(substitute(softmax, rows(r, n)));
    runSimCase(substitute(logSoftmax, rows(r, n)));
  }
}

const char *const kLayerNorm = R"(
func.func @layer_norm(%x: tensor<@R@x@N@xf32>, %w: tensor<@N@xf32>) -> (tensor<@R@x@N@xf32>, tensor<@R@x1xf32>, tensor<@R@x1xf32>) {
  %inv_n = kiln.constant @INVN@ : tensor<@R@x1xf32>
  %eps = kiln.constant 1.0e-05 : tensor<@R@x1xf32>
  %s = kiln.reduce_sum %x [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %sr = kiln.reshape %s : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %mean = kiln.mul %sr, %inv_n : tensor<@R@x1xf32>
  %mb = kiln.broadcast %mean : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %d = kiln.sub %x, %mb : tensor<@R@x@N@xf32>
  %sq = kiln.mul %d, %d : tensor<@R@x@N@xf32>
  %v = kiln.reduce_sum %sq [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %vr = kiln.reshape %v : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %var = kiln.mul %vr, %inv_n : tensor<@R@x1xf32>
  %ve = kiln.add %var, %eps : tensor<@R@x1xf32>
  %r = kiln.rsqrt %ve : tensor<@R@x1xf32>
  %rb = kiln.broadcast %r : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %n = kiln.mul %d, %rb : tensor<@R@x@N@xf32>
  %wb = kiln.broadcast %w : tensor<@N@xf32> -> tensor<@R@x@N@xf32>
  %y = kiln.mul %n, %wb : tensor<@R@x@N@xf32>
  return %y, %mean, %r : tensor<@R@x@N@xf32>, tensor<@R@x1xf32>, tensor<@R@x1xf32>
})";

TEST(CudaSimRows, LayerNormWithItsSavedStatistics) {
  for (auto [r, n] : {std::pair<int64_t, int64_t>{17, 100}, {3, 32}, {1, 1}, {2, 2048}, {3, 1111}}) {
    SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(n));
    SimCaseRun run = runSimCase(substitute(kLayerNorm, rows(r, n)));
    EXPECT_EQ(run.sim.results.size(), n > 1 ? 3u : 1u); // at 1x1 fusion 0 is the first sum alone
  }
}

TEST(CudaSimRows, LayerNormOverTheLastDimOfARank3Tensor) {
  runSimCase(R"(
func.func @layer_norm(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>) {
  %inv_n = kiln.constant 0.125 : tensor<2x3x1xf32>
  %eps = kiln.constant 1.0e-05 : tensor<2x3x1xf32>
  %s = kiln.reduce_sum %x [2] : tensor<2x3x8xf32> -> tensor<2x3xf32>
  %sr = kiln.reshape %s : tensor<2x3xf32> -> tensor<2x3x1xf32>
  %mean = kiln.mul %sr, %inv_n : tensor<2x3x1xf32>
  %mb = kiln.broadcast %mean : tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %d = kiln.sub %x, %mb : tensor<2x3x8xf32>
  %sq = kiln.mul %d, %d : tensor<2x3x8xf32>
  %v = kiln.reduce_sum %sq [2] : tensor<2x3x8xf32> -> tensor<2x3xf32>
  %vr = kiln.reshape %v : tensor<2x3xf32> -> tensor<2x3x1xf32>
  %var = kiln.mul %vr, %inv_n : tensor<2x3x1xf32>
  %ve = kiln.add %var, %eps : tensor<2x3x1xf32>
  %r = kiln.rsqrt %ve : tensor<2x3x1xf32>
  %rb = kiln.broadcast %r : tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %n = kiln.mul %d, %rb : tensor<2x3x8xf32>
  %wb = kiln.broadcast %w : tensor<8xf32> -> tensor<2x3x8xf32>
  %y = kiln.mul %n, %wb : tensor<2x3x8xf32>
  return %y, %mean : tensor<2x3x8xf32>, tensor<2x3x1xf32>
})");
}

// The emitter's own test kernel (FuseForTests.h's layerNormBf16Text): bf16 in
// and out, statistics in f32, a block per 4096-element row.
TEST(CudaSimRows, LayerNormBf16LongRows) {
  SimCaseRun run = runSimCase(kiln::test::layerNormBf16Text(3));
  EXPECT_EQ(kiln::codegen::cuda::kindName(run.kernel.launch.kind), std::string("block-rows"));
}

// fused_layer_norm.cpp's backward: xhat = (x - mean) rstd,
// dx = rstd (g w - mean(g w) - xhat mean(g w xhat)).
TEST(CudaSimRows, LayerNormBackward) {
  const char *text = R"(
func.func @layer_norm_bw(%g: tensor<@R@x@N@xf32>, %x: tensor<@R@x@N@xf32>, %w: tensor<@N@xf32>,
                         %mean: tensor<@R@x1xf32>, %rstd: tensor<@R@x1xf32>) -> tensor<@R@x@N@xf32> {
  %inv_n = kiln.constant @INVN@ : tensor<@R@x1xf32>
  %wb = kiln.broadcast %w : tensor<@N@xf32> -> tensor<@R@x@N@xf32>
  %mb = kiln.broadcast %mean : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %rb = kiln.broadcast %rstd : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %d = kiln.sub %x, %mb : tensor<@R@x@N@xf32>
  %xhat = kiln.mul %d, %rb : tensor<@R@x@N@xf32>
  %gw = kiln.mul %g, %wb : tensor<@R@x@N@xf32>
  %s1 = kiln.reduce_sum %gw [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %s1r = kiln.reshape %s1 : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %m1 = kiln.mul %s1r, %inv_n : tensor<@R@x1xf32>
  %m1b = kiln.broadcast %m1 : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %gwx = kiln.mul %gw, %xhat : tensor<@R@x@N@xf32>
  %s2 = kiln.reduce_sum %gwx [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %s2r = kiln.reshape %s2 : tensor<@R@xf32> -> tensor<@R@x1xf32>
  %m2 = kiln.mul %s2r, %inv_n : tensor<@R@x1xf32>
  %m2b = kiln.broadcast %m2 : tensor<@R@x1xf32> -> tensor<@R@x@N@xf32>
  %t = kiln.mul %xhat, %m2b : tensor<@R@x@N@xf32>
  %u = kiln.sub %gw, %m1b : tensor<@R@x@N@xf32>
  %v = kiln.sub %u, %t : tensor<@R@x@N@xf32>
  %dx = kiln.mul %v, %rb : tensor<@R@x@N@xf32>
  return %dx : tensor<@R@x@N@xf32>
})";
  for (auto [r, n] : {std::pair<int64_t, int64_t>{6, 64}, {19, 37}, {3, 1536}}) {
    SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(n));
    runSimCase(substitute(text, rows(r, n)));
  }
}

TEST(CudaSimRows, ReductionWithPrologueAndEpilogue) {
  // A row norm: sqrt(sum(x * x)) over rows; max and min of 16-bit rows.
  const char *norm = R"(
func.func @norm(%x: tensor<@R@x@N@xf32>) -> tensor<@R@xf32> {
  %0 = kiln.mul %x, %x : tensor<@R@x@N@xf32>
  %s = kiln.reduce_sum %0 [1] : tensor<@R@x@N@xf32> -> tensor<@R@xf32>
  %r = kiln.sqrt %s : tensor<@R@xf32>
  return %r : tensor<@R@xf32>
})";
  runSimCase(substitute(norm, rows(9, 45)));
  runSimCase(substitute(norm, rows(2, 3000)));
  const char *extremes = R"(
func.func @extremes(%x: tensor<@R@x@N@x@T@>) -> (tensor<@R@x@T@>, tensor<@R@x@T@>) {
  %a = kiln.reduce_max %x [1] : tensor<@R@x@N@x@T@> -> tensor<@R@x@T@>
  %b = kiln.reduce_min %x [1] : tensor<@R@x@N@x@T@> -> tensor<@R@x@T@>
  return %a, %b : tensor<@R@x@T@>, tensor<@R@x@T@>
})";
  for (const char *type : {"f16", "bf16", "f64", "i64"}) {
    SCOPED_TRACE(type);
    runSimCase(substitute(extremes, rows(6, 50, type)), SimCase().exact());
  }
}

// ---- column and full reductions: deterministic ----

/// Runs `text` under two thread-order seeds; the results must be the same bits.
void expectSameBitsUnderTwoSeeds(const std::string &text, const SimCase &c = {}) {
  namespace sim = kiln::runtime::sim;
  const sim::SimConfig saved = sim::config();
  sim::SimConfig other = saved;
  other.seed = saved.seed + 76;
  SimCaseRun a = runSimCase(text, c);
  sim::set_config(other);
  SimCaseRun b = runSimCase(text, c);
  sim::set_config(saved);
  ASSERT_EQ(a.sim.results.size(), b.sim.results.size());
  for (size_t j = 0; j < a.sim.results.size(); ++j)
    EXPECT_EQ(kiln::test::compareBits(a.sim.results[j], b.sim.results[j]), "") << "result " << j;
}

TEST(CudaSimRows, ColumnSumsAreDeterministic) {
  const char *text = R"(
func.func @bias_grad(%g: tensor<@R@x@N@xf32>) -> tensor<@N@xf32> {
  %s = kiln.reduce_sum %g [0] : tensor<@R@x@N@xf32> -> tensor<@N@xf32>
  return %s : tensor<@N@xf32>
})";
  expectSameBitsUnderTwoSeeds(substitute(text, rows(64, 24)));
  expectSameBitsUnderTwoSeeds(substitute(text, rows(1100, 3)));
  expectSameBitsUnderTwoSeeds(substitute(text, rows(1, 5)));
}

TEST(CudaSimRows, MiddleDimReduction) {
  runSimCase(R"(
func.func @middle(%x: tensor<4x50x6xf32>) -> tensor<4x6xf32> {
  %s = kiln.reduce_sum %x [1] : tensor<4x50x6xf32> -> tensor<4x6xf32>
  return %s : tensor<4x6xf32>
})");
}

TEST(CudaSimRows, FullSumsAreDeterministic) {
  const char *text = R"(
func.func @total(%a: tensor<@R@x@N@x@T@>) -> tensor<@T@> {
  %s = kiln.reduce_sum %a [0, 1] : tensor<@R@x@N@x@T@> -> tensor<@T@>
  return %s : tensor<@T@>
})";
  expectSameBitsUnderTwoSeeds(substitute(text, rows(40, 25, "f32")));
  expectSameBitsUnderTwoSeeds(substitute(text, rows(3, 1000, "f32")));
  expectSameBitsUnderTwoSeeds(substitute(text, rows(50, 40, "i64")), SimCase().exact());
  expectSameBitsUnderTwoSeeds(substitute(text, rows(1, 1, "f32")));
}

// ---- argmax / argmin: the indices exactly ----

TEST(CudaSimRows, ArgMaxArgMinIndicesWithTies) {
  const char *text = R"(
func.func @arg(%x: tensor<@R@x@N@xf32>) -> (tensor<@R@xi64>, tensor<@R@xi64>) {
  %a = kiln.argmax %x [1] : tensor<@R@x@N@xf32> -> tensor<@R@xi64>
  %b = kiln.argmin %x [1] : tensor<@R@x@N@xf32> -> tensor<@R@xi64>
  return %a, %b : tensor<@R@xi64>, tensor<@R@xi64>
})";
  // Values from a small set, so every row has ties for its max and min: the
  // first index wins (PyTorch).
  auto ties = [](Args &args) {
    for (int64_t i = 0; i < args[0].numel(); ++i)
      args[0].set(i, static_cast<double>((i * 7919) % 5) - 2.0);
  };
  for (auto [r, n] : {std::pair<int64_t, int64_t>{4, 8}, {25, 37}, {1, 1}, {3, 1500}}) {
    SCOPED_TRACE(std::to_string(r) + "x" + std::to_string(n));
    runSimCase(substitute(text, rows(r, n)), SimCase().exact());
    SimCaseRun run = runSimCase(substitute(text, rows(r, n)), SimCase().exact().inputs(ties));
    for (int64_t i = 0; i < r && run.sim.results.size() == 2; ++i) {
      int64_t first = 0;
      for (int64_t j = 1; j < n; ++j)
        if (run.args[0].at(i * n + j) > run.args[0].at(i * n + first))
          first = j;
      EXPECT_EQ(run.sim.results[0].at(i), first) << "row " << i;
    }
  }
}

// NaN is the maximum (and the minimum) of its row, the first NaN wins, as
// PyTorch's argmax/argmin; 16-bit and integer inputs.
TEST(CudaSimRows, ArgMaxArgMinNaNAndOtherTypes) {
  const char *text = R"(
func.func @arg(%x: tensor<@R@x@N@x@T@>) -> (tensor<@R@xi64>, tensor<@R@xi64>) {
  %a = kiln.argmax %x [1] : tensor<@R@x@N@x@T@> -> tensor<@R@xi64>
  %b = kiln.argmin %x [1] : tensor<@R@x@N@x@T@> -> tensor<@R@xi64>
  return %a, %b : tensor<@R@xi64>, tensor<@R@xi64>
})";
  SimCaseRun run = runSimCase(substitute(text, rows(3, 40)), SimCase().exact().inputs([](Args &args) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    args[0].set(1 * 40 + 17, nan);
    args[0].set(1 * 40 + 30, nan);
    args[0].set(2 * 40 + 39, nan);
  }));
  ASSERT_EQ(run.sim.results.size(), 2u);
  EXPECT_EQ(run.sim.results[0].at(1), 17);
  EXPECT_EQ(run.sim.results[1].at(1), 17);
  EXPECT_EQ(run.sim.results[0].at(2), 39);
  for (const char *type : {"bf16", "f16", "i64", "f64"}) {
    SCOPED_TRACE(type);
    runSimCase(substitute(text, rows(9, 70, type)), SimCase().exact());
  }
}

// ---- a shape-generic row kernel at two sizes ----

TEST(CudaSimRows, ShapeGenericSoftmaxRunsAtTwoSizes) {
  const std::string small = substitute(kSoftmax, rows(3, 40)), large = substitute(kSoftmax, rows(70, 40));
  SimCaseRun a = runSimCase(small, SimCase().rowSplit(small));
  SimCaseRun b = runSimCase(large, SimCase().rowSplit(small));
  EXPECT_EQ(a.kernel.source, b.kernel.source);
  const std::string longSmall = substitute(kSoftmax, rows(2, 1300)), longLarge = substitute(kSoftmax, rows(9, 1300));
  runSimCase(longLarge, SimCase().rowSplit(longSmall));
}

} // namespace
