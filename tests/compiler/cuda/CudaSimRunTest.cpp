// Emitted kernels run on the CUDA-on-CPU simulator (runtime/src/sim: random
// thread order, checked barriers and shuffles, guard-paged memory) against
// the same kiln.fusion on the CPU target (SimRunForTests.h): pointwise
// kernels (vector path, tails, views, every dtype), gathers with their
// index checks, scatter_add (bit for bit), cumsum, and shape-generic
// kernels. Row reductions: CudaSimRowsTest.cpp.
#include "FuseForTests.h"
#include "SimRunForTests.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "Half.h" // runtime/src/cpu: the reference conversions

namespace {

using kiln::DType;
using kiln::test::HostTensor;
using kiln::test::runSimCase;
using kiln::test::SimCase;
using kiln::test::SimCaseRun;
using kiln::test::substitute;
using Args = std::vector<HostTensor>;

// ---- pointwise ----

const char *const kChain = R"(
func.func @f(%a: tensor<@S@xf32>, %b: tensor<@S@xf32>) -> (tensor<@S@xf32>, tensor<@S@xf32>) {
  %0 = kiln.mul %a, %b : tensor<@S@xf32>
  %1 = kiln.exp %0 : tensor<@S@xf32>
  %2 = kiln.sub %1, %a : tensor<@S@xf32>
  return %2, %0 : tensor<@S@xf32>, tensor<@S@xf32>
})";

// 3x37 = 111: 27 float4 vectors and a tail of 3; 1 element: the tail alone;
// 5x1000: several blocks; two results (multi-output).
TEST(CudaSimRun, PointwiseVectorPathTailsAndTwoResults) {
  for (const char *shape : {"3x37", "1", "5x1000", "64"}) {
    SCOPED_TRACE(shape);
    SimCaseRun run = runSimCase(substitute(kChain, {{"S", shape}}));
    if (std::string(shape) != "1")
      EXPECT_NE(run.kernel.source.find("kiln_vec<float, 4>"), std::string::npos);
    ASSERT_EQ(run.sim.results.size(), 2u);
    // kiln-fuse orders results by program order: the product, then the chain.
    for (int64_t i = 0; i < run.args[0].numel(); ++i)
      EXPECT_EQ(run.sim.results[0].at(i), static_cast<float>(run.args[0].at(i) * run.args[1].at(i))) << i;
  }
}

TEST(CudaSimRun, TransposedAndBroadcastOperandsUseTheirStrides) {
  SimCaseRun run = runSimCase(R"(
func.func @views(%a: tensor<40x33xf32>, %b: tensor<40xf32>, %c: tensor<33x1xf32>) -> tensor<33x40xf32> {
  %at = kiln.transpose %a [1, 0] : tensor<40x33xf32> -> tensor<33x40xf32>
  %bb = kiln.broadcast %b : tensor<40xf32> -> tensor<33x40xf32>
  %cb = kiln.broadcast %c : tensor<33x1xf32> -> tensor<33x40xf32>
  %0 = kiln.mul %at, %bb : tensor<33x40xf32>
  %1 = kiln.sub %0, %cb : tensor<33x40xf32>
  return %1 : tensor<33x40xf32>
})");
  EXPECT_EQ(run.kernel.source.find("kiln_vec"), std::string::npos) << "strided operands are not vectorized";
  ASSERT_EQ(run.sim.results.size(), 1u);
  for (int r = 0; r < 33; ++r)
    for (int c = 0; c < 40; ++c) {
      const float at = static_cast<float>(run.args[0].at(c * 33 + r)); // a^T[r][c]
      const float want = at * static_cast<float>(run.args[1].at(c)) - static_cast<float>(run.args[2].at(r));
      ASSERT_EQ(run.sim.results[0].at(r * 40 + c), want) << r << "," << c;
    }
}

TEST(CudaSimRun, SixteenBitIsStorageComputedInF32RoundedOnce) {
  for (const char *type : {"bf16", "f16"}) {
    SCOPED_TRACE(type);
    SimCaseRun run = runSimCase(substitute(R"(
func.func @lowp(%a: tensor<3x37x@T@>, %b: tensor<3x37x@T@>) -> tensor<3x37x@T@> {
  %0 = kiln.mul %a, %b : tensor<3x37x@T@>
  %1 = kiln.add %0, %a : tensor<3x37x@T@>
  return %1 : tensor<3x37x@T@>
})",
                                           {{"T", type}}),
                                SimCase().exact());
    EXPECT_NE(run.kernel.source.find(std::string(type) == "bf16" ? "kiln_vec<kiln_bf16, 8>" : "kiln_vec<kiln_half, 8>"),
              std::string::npos);
    ASSERT_EQ(run.sim.results.size(), 1u);
    const HostTensor &out = run.sim.results[0];
    for (int i = 0; i < 111; ++i) {
      const float x = static_cast<float>(run.args[0].at(i)), y = static_cast<float>(run.args[1].at(i));
      HostTensor want = kiln::test::zeros(out.dtype, {1});
      want.set(0, x * y + x); // the product is not rounded to 16 bits
      ASSERT_EQ(out.as<uint16_t>()[i], want.as<uint16_t>()[0]) << i;
    }
  }
}

TEST(CudaSimRun, Float64AndInt64Pointwise) {
  runSimCase(R"(
func.func @f64(%a: tensor<7x45xf64>, %b: tensor<45xf64>) -> tensor<7x45xf64> {
  %bb = kiln.broadcast %b : tensor<45xf64> -> tensor<7x45xf64>
  %0 = kiln.mul %a, %bb : tensor<7x45xf64>
  %1 = kiln.tanh %0 : tensor<7x45xf64>
  return %1 : tensor<7x45xf64>
})");
  runSimCase(R"(
func.func @i64(%a: tensor<5x19xi64>, %b: tensor<5x19xi64>) -> (tensor<5x19xi64>, tensor<5x19xi1>) {
  %0 = kiln.mul %a, %b : tensor<5x19xi64>
  %1 = kiln.sub %0, %a : tensor<5x19xi64>
  %2 = kiln.compare ge, %1, %b : tensor<5x19xi64>
  return %1, %2 : tensor<5x19xi64>, tensor<5x19xi1>
})",
             SimCase().exact());
}

TEST(CudaSimRun, DivisionModesFollowPyTorch) {
  // Two fusions: the float ops and the integer ops share no operand.
  const char *text = R"(
func.func @modes(%a: tensor<8xf32>, %b: tensor<8xf32>, %p: tensor<8xi64>, %q: tensor<8xi64>)
    -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xi64>, tensor<8xi64>, tensor<8xi64>, tensor<8xi64>) {
  %0 = kiln.floor_div %a, %b : tensor<8xf32>
  %1 = kiln.remainder %a, %b : tensor<8xf32>
  %2 = kiln.fmod %a, %b : tensor<8xf32>
  %3 = kiln.floor_div %p, %q : tensor<8xi64>
  %4 = kiln.remainder %p, %q : tensor<8xi64>
  %5 = kiln.fmod %p, %q : tensor<8xi64>
  %6 = kiln.div %p, %q : tensor<8xi64>
  return %0, %1, %2, %3, %4, %5, %6 : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xi64>, tensor<8xi64>, tensor<8xi64>, tensor<8xi64>
})";
  auto inputs = [](Args &args) {
    const std::vector<double> a = {7, -7, 7, -7, 5.5, -0.5, 3, 1}, b = {2, 2, -2, -2, 1.5, 4, 0, 0};
    const std::vector<double> p = {7, -7, 7, -7, 9, -1, 3, 0}, q = {2, 2, -2, -2, 3, 4, 0, 5};
    for (int i = 0; i < 8; ++i) {
      args[0].set(i, a[i]);
      args[1].set(i, b[i]);
      args[2].set(i, p[i]);
      args[3].set(i, q[i]);
    }
  };
  SimCaseRun f = runSimCase(text, SimCase().at(0).exact().inputs(inputs));
  SimCaseRun n = runSimCase(text, SimCase().at(1).exact().inputs(inputs));
  ASSERT_EQ(f.sim.results.size(), 3u);
  ASSERT_EQ(n.sim.results.size(), 4u);
  // torch.div(rounding_mode="floor"), torch.remainder (divisor's sign), torch.fmod (dividend's sign).
  const std::vector<float> fdRef = {3, -4, -4, 3, 3, -1, INFINITY, INFINITY};
  const std::vector<float> remRef = {1, 1, -1, -1, 1, 3.5f}, fmRef = {1, -1, 1, -1, 1, -0.5f};
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(f.sim.results[0].at(i), fdRef[i]) << i;
    EXPECT_EQ(f.sim.results[1].at(i), remRef[i]) << i;
    EXPECT_EQ(f.sim.results[2].at(i), fmRef[i]) << i;
  }
  EXPECT_EQ(f.sim.results[0].at(6), INFINITY); // 3 / 0
  EXPECT_TRUE(std::isnan(f.sim.results[1].at(6)) && std::isnan(f.sim.results[2].at(6)));
  // Integers: Python's // and %; a zero divisor gives 0 (a kernel cannot raise).
  const std::vector<long long> ifdRef = {3, -4, -4, 3, 3, -1, 0, 0}, iremRef = {1, 1, -1, -1, 0, 3, 0, 0};
  const std::vector<long long> ifmRef = {1, -1, 1, -1, 0, -1, 0, 0}, idivRef = {3, -3, -3, 3, 3, 0, 0, 0};
  EXPECT_EQ(n.sim.results[0].as<long long>(), ifdRef);
  EXPECT_EQ(n.sim.results[1].as<long long>(), iremRef);
  EXPECT_EQ(n.sim.results[2].as<long long>(), ifmRef);
  EXPECT_EQ(n.sim.results[3].as<long long>(), idivRef);
}

TEST(CudaSimRun, RoundHalfToEvenCompareSelectConvert) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SimCaseRun run = runSimCase(R"(
func.func @rcs(%a: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xi1>, tensor<8xf32>, tensor<8xi64>) {
  %r = kiln.round %a : tensor<8xf32>
  %c = kiln.compare gt, %a, %b : tensor<8xf32>
  %s = kiln.select %c, %a, %b : tensor<8xf32>
  %m = kiln.maximum %a, %b : tensor<8xf32>
  %t = kiln.add %s, %m : tensor<8xf32>
  %i = kiln.convert %a : tensor<8xf32> -> tensor<8xi64>
  return %r, %c, %t, %i : tensor<8xf32>, tensor<8xi1>, tensor<8xf32>, tensor<8xi64>
})",
                              SimCase().exact().inputs([nan](Args &args) {
                                 const std::vector<float> a = {0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 3.7f, nan, 1};
                                 const std::vector<float> b = {0, 2, 2, 0, -3, 4, 0, nan};
                                 for (int i = 0; i < 8; ++i) {
                                   args[0].set(i, a[i]);
                                   args[1].set(i, b[i]);
                                 }
                               }));
  ASSERT_EQ(run.sim.results.size(), 4u);
  const std::vector<float> rRef = {0, 2, 2, -0.0f, -2, 4};
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(run.sim.results[0].at(j), rRef[j]) << j;
    EXPECT_EQ(std::signbit(run.sim.results[0].at(j)), std::signbit(rRef[j])) << j;
  }
  EXPECT_EQ(run.sim.results[1].as<unsigned char>(), (std::vector<unsigned char>{1, 0, 1, 0, 1, 0, 0, 0}));
  for (int j = 0; j < 6; ++j) // select(a > b, a, b) + maximum(a, b); maximum propagates NaN
    EXPECT_EQ(run.sim.results[2].at(j), 2 * std::max(run.args[0].at(j), run.args[1].at(j))) << j;
  EXPECT_TRUE(std::isnan(run.sim.results[2].at(6)) && std::isnan(run.sim.results[2].at(7)));
  EXPECT_EQ(run.sim.results[3].at(5), 3); // truncation toward zero
  EXPECT_EQ(run.sim.results[3].at(4), -2);
}

// ---- gather and its index check ----

const char *const kEmbedding = R"(
func.func @embed(%t: tensor<50x8xf32>, %i: tensor<6x8xi64>) -> tensor<6x8xf32> {
  %g = kiln.gather %t[%i] dim = 0 as "embedding" : tensor<50x8xf32>, tensor<6x8xi64> -> tensor<6x8xf32>
  %r = kiln.relu %g : tensor<6x8xf32>
  return %r : tensor<6x8xf32>
})";

/// Index tensor `arg` filled with (7 i + 3) mod `size`: in range, repeated.
std::function<void(Args &)> indicesInRange(size_t arg, int64_t size) {
  return [=](Args &args) {
    for (int64_t i = 0; i < args[arg].numel(); ++i)
      args[arg].set(i, (7 * i + 3) % size);
  };
}

TEST(CudaSimRun, GatherInRangeWritesStatusZero) {
  SimCaseRun run = runSimCase(kEmbedding, SimCase().exact().inputs(indicesInRange(1, 50)));
  ASSERT_EQ(run.sim.statuses.size(), 1u);
  EXPECT_EQ(run.sim.statuses[0], (std::array<long long, 2>{0, 0}));
}

TEST(CudaSimRun, OutOfRangeGatherIndexSetsTheStatusWord) {
  for (long long bad : {50LL, -1LL, 1000000LL}) {
    SimCaseRun run = runSimCase(kEmbedding, SimCase().exact().inputs([bad](Args &args) {
                                               indicesInRange(1, 50)(args);
                                               args[1].set(21, bad);
                                               args[1].set(40, 77); // a later bad index: not the one reported
                                             }));
    ASSERT_EQ(run.sim.statuses.size(), 1u);
    EXPECT_EQ(run.sim.statuses[0], (std::array<long long, 2>{1, bad})); // the first in row-major order
  }
}

TEST(CudaSimRun, GatherAlongDimOneOfATransposedTable) {
  SimCaseRun run = runSimCase(R"(
func.func @gather1(%t: tensor<13x9xf32>, %i: tensor<9x5xi64>) -> tensor<9x5xf32> {
  %tt = kiln.transpose %t [1, 0] : tensor<13x9xf32> -> tensor<9x13xf32>
  %g = kiln.gather %tt[%i] dim = 1 as "gather" : tensor<9x13xf32>, tensor<9x5xi64> -> tensor<9x5xf32>
  %e = kiln.exp %g : tensor<9x5xf32>
  return %e : tensor<9x5xf32>
})",
                              SimCase().inputs(indicesInRange(1, 13)));
  ASSERT_EQ(run.sim.results.size(), 1u);
  for (int r = 0; r < 9; ++r)
    for (int c = 0; c < 5; ++c) {
      const int64_t j = static_cast<int64_t>(run.args[1].at(r * 5 + c));
      EXPECT_FLOAT_EQ(run.sim.results[0].at(r * 5 + c), std::exp(static_cast<float>(run.args[0].at(j * 9 + r))));
    }
}

// ---- scatter_add: bit for bit, as the emitter claims ----

const char *const kScatterAdd = R"(
func.func @embed_grad(%i: tensor<@N@x@D@xi64>, %g: tensor<@N@x@D@x@T@>) -> tensor<@V@x@D@x@T@> {
  %z = kiln.constant 0.0 : tensor<@V@x@D@x@T@>
  %s = kiln.scatter_add %z[%i], %g dim = 0 : tensor<@V@x@D@x@T@>, tensor<@N@x@D@xi64>, tensor<@N@x@D@x@T@>
  return %s : tensor<@V@x@D@x@T@>
})";

TEST(CudaSimRun, ScatterAddMatchesTheCpuBitForBit) {
  struct Shape {
    const char *n, *d, *v, *t;
  };
  for (Shape s : {Shape{"6", "8", "50", "f32"}, Shape{"40", "3", "5", "f32"}, Shape{"1", "1", "1", "f32"},
                  Shape{"33", "7", "4", "f64"}, Shape{"12", "5", "6", "i64"}}) {
    SCOPED_TRACE(std::string(s.n) + "x" + s.d + " -> " + s.v + " " + s.t);
    const int64_t v = std::stoll(s.v);
    SimCaseRun run = runSimCase(substitute(kScatterAdd, {{"N", s.n}, {"D", s.d}, {"V", s.v}, {"T", s.t}}),
                                SimCase().exact().inputs(indicesInRange(0, v)));
    ASSERT_EQ(run.sim.statuses.size(), 1u);
    EXPECT_EQ(run.sim.statuses[0], (std::array<long long, 2>{0, 0}));
  }
}

TEST(CudaSimRun, ScatterAddBadIndexAddsNowhereAndIsReported) {
  SimCaseRun run = runSimCase(substitute(kScatterAdd, {{"N", "6"}, {"D", "8"}, {"V", "50"}, {"T", "f32"}}),
                              SimCase().exact().inputs([](Args &args) {
                                 indicesInRange(0, 50)(args);
                                 args[0].set(13, -3);
                               }));
  ASSERT_EQ(run.sim.statuses.size(), 1u);
  EXPECT_EQ(run.sim.statuses[0], (std::array<long long, 2>{1, -3}));
}

// 3000 indices: more than block 0 scans in one step of its loop; the
// first bad one (row-major) is reported whichever thread sees it first.
TEST(CudaSimRun, IndexCheckOfALargeIndexTensor) {
  const char *text = R"(
func.func @embed(%t: tensor<20x4xf32>, %i: tensor<750x4xi64>) -> tensor<750x4xf32> {
  %g = kiln.gather %t[%i] dim = 0 as "embedding" : tensor<20x4xf32>, tensor<750x4xi64> -> tensor<750x4xf32>
  return %g : tensor<750x4xf32>
})";
  for (int64_t at : {2999, 1100, 0}) {
    SimCaseRun run = runSimCase(text, SimCase().exact().inputs([at](Args &args) {
      indicesInRange(1, 20)(args);
      args[1].set(at, 20 + at);
      args[1].set(2999, -5);
    }));
    ASSERT_EQ(run.sim.statuses.size(), 1u);
    EXPECT_EQ(run.sim.statuses[0], (std::array<long long, 2>{1, at == 2999 ? -5 : 20 + at}));
  }
  SimCaseRun scatter = runSimCase(substitute(kScatterAdd, {{"N", "750"}, {"D", "4"}, {"V", "20"}, {"T", "f32"}}),
                                  SimCase().exact().inputs([](Args &args) {
                                    indicesInRange(0, 20)(args);
                                    args[0].set(2500, 20);
                                  }));
  ASSERT_EQ(scatter.sim.statuses.size(), 1u);
  EXPECT_EQ(scatter.sim.statuses[0], (std::array<long long, 2>{1, 20}));
}

// ---- cumsum ----

TEST(CudaSimRun, CumsumLinesShortLongAndStrided) {
  const char *text = R"(
func.func @cumsum(%x: tensor<@S@x@T@>) -> tensor<@S@x@T@> {
  %1 = kiln.cumsum %x [@D@] : tensor<@S@x@T@>
  return %1 : tensor<@S@x@T@>
})";
  struct Case {
    const char *shape, *dim, *type;
  };
  for (Case c : {Case{"4x300", "1", "f32"}, Case{"1x3000", "1", "f32"}, Case{"37x5", "0", "f32"},
                 Case{"1x1", "1", "f32"}, Case{"3x77", "1", "i64"}, Case{"6x40", "1", "f64"},
                 Case{"5x33", "1", "bf16"}}) {
    SCOPED_TRACE(std::string(c.shape) + " dim " + c.dim + " " + c.type);
    runSimCase(substitute(text, {{"S", c.shape}, {"D", c.dim}, {"T", c.type}}),
               std::string(c.type) == "i64" ? SimCase().exact() : SimCase());
  }
}

// ---- shape-generic (row-split) kernels: one kernel text, two sizes ----

TEST(CudaSimRun, ShapeGenericPointwiseKernelRunsAtTwoSizes) {
  const char *text = R"(
func.func @f(%a: tensor<@R@x37xf32>, %b: tensor<37xf32>) -> tensor<@R@x37xf32> {
  %bb = kiln.broadcast %b : tensor<37xf32> -> tensor<@R@x37xf32>
  %0 = kiln.add %a, %bb : tensor<@R@x37xf32>
  %1 = kiln.exp %0 : tensor<@R@x37xf32>
  return %1 : tensor<@R@x37xf32>
})";
  const std::string small = substitute(text, {{"R", "3"}}), large = substitute(text, {{"R", "70"}});
  SimCaseRun a = runSimCase(small, SimCase().rowSplit(small));
  SimCaseRun b = runSimCase(large, SimCase().rowSplit(small));
  EXPECT_EQ(a.kernel.source, b.kernel.source);
  EXPECT_EQ(a.kernel.params.back().name, "size0");
}

} // namespace
