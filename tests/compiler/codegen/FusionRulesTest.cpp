// kiln-fuse's rules end to end: small graphs that hit each rule (multi-output,
// siblings, reduction epilogues, the cycle check) compiled by compileGraph,
// with the kernel count and the values checked against plain C++.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "kiln/codegen/Compiler.h"
#include "kiln/runtime/LaunchExecutable.h"
#include "GraphTestUtils.h"

using namespace kiln;
using kiln::ir::ElementType;
using kiln::ir::OpKind;
using runtime::TensorView;

using namespace kiln::codegen_test;

class codegen_FusionRules : public ConformanceTest {};
INSTANTIATE_TEST_SUITE_P(cpu, codegen_FusionRules, ::testing::Values(DeviceType::CPU), deviceName);
INSTANTIATE_TEST_SUITE_P(checking, codegen_FusionRules, ::testing::Values(DeviceType::PrivateUse1), deviceName);

TEST_P(codegen_FusionRules, MultiOutputValueReturnedAndConsumed) {
  // e = exp(x) is returned and feeds n = neg(e) * x: one kernel, two results.
  GraphMaker m;
  int x = m.input({3, 5});
  int e = m.same(OpKind::Exp, {x});
  int n = m.same(OpKind::Mul, {m.same(OpKind::Neg, {e}), x});
  auto compiled = compileOk(m.done({e, n}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u);
  std::vector<float> xs = values(15, 1);
  auto res = runOk(*compiled.forward, {f32({3, 5}, xs)});
  ASSERT_EQ(res.size(), 2u);
  std::vector<float> we(15), wn(15);
  for (int i = 0; i < 15; ++i) {
    we[i] = std::exp(xs[i]);
    wn[i] = -we[i] * xs[i];
  }
  expectNear(read<float>(res[0]), we);
  expectNear(read<float>(res[1]), wn);
}

TEST_P(codegen_FusionRules, ReluBackwardFeedsMatmulAndBiasGrad) {
  // gz = (z > 0) ? gy : 0 feeds a matmul (outside) and sum(gz, 0) in ONE
  // kernel that yields gz and the bias gradient.
  const int64_t N = 4, O = 6, I = 3;
  GraphMaker m;
  int z = m.input({N, O}), gy = m.input({N, O}), w = m.input({O, I});
  int zero = m.constant({N, O}, 0.0);
  int mask = m.node(OpKind::Compare, {z, zero}, {N, O}, ElementType::Bool,
                    [](ir::Node &n) { n.predicate = ir::Predicate::GT; });
  int gz = m.node(OpKind::Select, {mask, gy, zero}, {N, O});
  int gx = m.node(OpKind::Matmul, {gz, w}, {N, I});
  int gb = m.reduce(OpKind::ReduceSum, gz, {0}, {O});
  auto compiled = compileOk(m.done({gx, gb}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u);
  std::vector<float> zs = values(N * O, 2), gys = values(N * O, 3), ws = values(O * I, 4);
  auto res = runOk(*compiled.forward, {f32({N, O}, zs), f32({N, O}, gys), f32({O, I}, ws)});
  ASSERT_EQ(res.size(), 2u);
  std::vector<float> wgx(N * I, 0.0f), wgb(O, 0.0f);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      float g = zs[n * O + o] > 0 ? gys[n * O + o] : 0.0f;
      wgb[o] += g;
      for (int i = 0; i < I; ++i)
        wgx[n * I + i] += g * ws[o * I + i];
    }
  expectNear(read<float>(res[0]), wgx, 1e-4f);
  expectNear(read<float>(res[1]), wgb, 1e-4f);
}

TEST_P(codegen_FusionRules, SiblingsShareAnInput) {
  // exp(x), relu(x) - x, sum(x, 1) and max(x, 1): one kernel, four results.
  GraphMaker m;
  int x = m.input({4, 6});
  int e = m.same(OpKind::Exp, {x});
  int r = m.same(OpKind::Sub, {m.same(OpKind::Relu, {x}), x});
  int s = m.reduce(OpKind::ReduceSum, x, {1}, {4});
  int mx = m.reduce(OpKind::ReduceMax, x, {1}, {4});
  auto compiled = compileOk(m.done({e, r, s, mx}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u);
  std::vector<float> xs = values(24, 5);
  auto res = runOk(*compiled.forward, {f32({4, 6}, xs)});
  ASSERT_EQ(res.size(), 4u);
  std::vector<float> we(24), wr(24), ws(4, 0.0f), wm(4, -INFINITY);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) {
      float v = xs[i * 6 + j];
      we[i * 6 + j] = std::exp(v);
      wr[i * 6 + j] = (v > 0 ? v : 0.0f) - v;
      ws[i] += v;
      wm[i] = std::max(wm[i], v);
    }
  expectNear(read<float>(res[0]), we);
  expectNear(read<float>(res[1]), wr);
  expectNear(read<float>(res[2]), ws);
  expectNear(read<float>(res[3]), wm);
}

TEST_P(codegen_FusionRules, ReductionEpilogue) {
  // s = sum(exp(x), 1) is returned and continues as log(s) * 0.25: one
  // kernel with prologue, reduction and epilogue.
  GraphMaker m;
  int x = m.input({5, 7});
  int s = m.reduce(OpKind::ReduceSum, m.same(OpKind::Exp, {x}), {1}, {5});
  int y = m.same(OpKind::Mul, {m.same(OpKind::Log, {s}), m.constant({5}, 0.25)});
  auto compiled = compileOk(m.done({y, s}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u);
  std::vector<float> xs = values(35, 6);
  auto res = runOk(*compiled.forward, {f32({5, 7}, xs)});
  ASSERT_EQ(res.size(), 2u);
  std::vector<float> wy(5), ws(5, 0.0f);
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 7; ++j)
      ws[i] += std::exp(xs[i * 7 + j]);
    wy[i] = std::log(ws[i]) * 0.25f;
  }
  expectNear(read<float>(res[0]), wy);
  expectNear(read<float>(res[1]), ws);
}

TEST_P(codegen_FusionRules, StableLogSumExpAndMeanOverRows) {
  // lse = log(sum(exp(x - max(x, 1)), 1)) + max(x, 1): one row fusion (the
  // max reaches the sum through reshape + broadcast, which join the kernel).
  GraphMaker m;
  int x = m.input({4, 9});
  int mx = m.reduce(OpKind::ReduceMax, x, {1}, {4});
  int mxb = m.node(OpKind::Broadcast, {m.node(OpKind::Reshape, {mx}, {4, 1})}, {4, 9});
  int s = m.reduce(OpKind::ReduceSum, m.same(OpKind::Exp, {m.same(OpKind::Sub, {x, mxb})}), {1}, {4});
  int lse = m.same(OpKind::Add, {m.same(OpKind::Log, {s}), mx});
  auto compiled = compileOk(m.done({lse}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u);
  std::vector<float> xs = values(36, 7);
  auto res = runOk(*compiled.forward, {f32({4, 9}, xs)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(4);
  for (int i = 0; i < 4; ++i) {
    float top = -INFINITY, sum = 0.0f;
    for (int j = 0; j < 9; ++j)
      top = std::max(top, xs[i * 9 + j]);
    for (int j = 0; j < 9; ++j)
      sum += std::exp(xs[i * 9 + j] - top);
    want[i] = std::log(sum) + top;
  }
  expectNear(read<float>(res[0]), want);
}

TEST_P(codegen_FusionRules, SoftmaxIsOneRowKernel) {
  GraphMaker m;
  int x = m.input({3, 8});
  auto rowReduce = [&](OpKind k, int v) {
    return m.node(OpKind::Broadcast, {m.reduce(k, v, {1}, {3, 1}, /*keepdim=*/true)}, {3, 8});
  };
  int e = m.same(OpKind::Exp, {m.same(OpKind::Sub, {x, rowReduce(OpKind::ReduceMax, x)})});
  int y = m.same(OpKind::Div, {e, rowReduce(OpKind::ReduceSum, e)});
  auto compiled = compileOk(m.done({y}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u); // max, broadcast, sub, exp, sum, broadcast, div
  std::vector<float> xs = values(24, 8);
  auto res = runOk(*compiled.forward, {f32({3, 8}, xs)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(24);
  for (int i = 0; i < 3; ++i) {
    float top = -INFINITY, sum = 0.0f;
    for (int j = 0; j < 8; ++j)
      top = std::max(top, xs[i * 8 + j]);
    for (int j = 0; j < 8; ++j)
      sum += std::exp(xs[i * 8 + j] - top);
    for (int j = 0; j < 8; ++j)
      want[i * 8 + j] = std::exp(xs[i * 8 + j] - top) / sum;
  }
  expectNear(read<float>(res[0]), want);
}

TEST_P(codegen_FusionRules, CycleThroughMatmulKeepsTwoKernels) {
  // e = exp(x) feeds a matmul whose result meets e again: merging the two
  // elementwise groups would be a cycle, so there are two kernels.
  GraphMaker m;
  int x = m.input({4, 4}), w = m.input({4, 4});
  int e = m.same(OpKind::Exp, {x});
  int p = m.node(OpKind::Matmul, {e, w}, {4, 4});
  int y = m.same(OpKind::Add, {m.same(OpKind::Sub, {x, p}), e});
  auto compiled = compileOk(m.done({y}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 2u);
  std::vector<float> xs = values(16, 9), ws = values(16, 10);
  auto res = runOk(*compiled.forward, {f32({4, 4}, xs), f32({4, 4}, ws)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(16);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      float acc = 0.0f;
      for (int k = 0; k < 4; ++k)
        acc += std::exp(xs[i * 4 + k]) * ws[k * 4 + j];
      want[i * 4 + j] = xs[i * 4 + j] - acc + std::exp(xs[i * 4 + j]);
    }
  expectNear(read<float>(res[0]), want, 1e-4f);
}

TEST_P(codegen_FusionRules, JointLinearReluBackwardFusesMaskAndBiasGrad) {
  // The saved pre-activation z: forward yields z and relu(z) from one kernel;
  // backward computes the mask, gz and sum(gz, 0) in one kernel.
  const int64_t N = 4, I = 3, O = 5;
  GraphMaker m;
  int x = m.input({N, I}), w = m.input({I, O}), b = m.input({O});
  int gy = m.input({N, O}, ir::InputRole::Tangent);
  int z = m.same(OpKind::Add, {m.node(OpKind::Matmul, {x, w}, {N, O}), m.node(OpKind::Broadcast, {b}, {N, O})});
  int y = m.same(OpKind::Relu, {z});
  int zero = m.constant({N, O}, 0.0);
  int mask = m.node(OpKind::Compare, {z, zero}, {N, O}, ElementType::Bool,
                    [](ir::Node &n) { n.predicate = ir::Predicate::GT; });
  int gz = m.node(OpKind::Select, {mask, gy, zero}, {N, O});
  int wt = m.node(OpKind::Transpose, {w}, {O, I}, ElementType::F32, [](ir::Node &n) { n.ints = {1, 0}; });
  int gx = m.node(OpKind::Matmul, {gz, wt}, {N, I});
  int gb = m.reduce(OpKind::ReduceSum, gz, {0}, {O});
  auto compiled = compileOk(m.done({y, gx, gb}, 1));
  ASSERT_TRUE(compiled.forward);
  ASSERT_TRUE(compiled.backward);
  EXPECT_EQ(compiled.fusions.size(), 2u); // one forward, one backward

  std::vector<float> xs = values(N * I, 11), ws = values(I * O, 12), bs = values(O, 13), gys = values(N * O, 14);
  std::vector<TensorView> primals = {f32({N, I}, xs), f32({I, O}, ws), f32({O}, bs)};
  auto fwd = runOk(*compiled.forward, primals);
  ASSERT_EQ(fwd.size(), static_cast<size_t>(1 + compiled.num_saved));
  std::vector<TensorView> bwdIn = primals;
  bwdIn.insert(bwdIn.end(), fwd.begin() + 1, fwd.end());
  bwdIn.push_back(f32({N, O}, gys));
  auto grads = runOk(*compiled.backward, bwdIn);
  ASSERT_EQ(grads.size(), 2u);

  std::vector<float> wy(N * O), wgx(N * I, 0.0f), wgb(O, 0.0f);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      float acc = bs[o];
      for (int i = 0; i < I; ++i)
        acc += xs[n * I + i] * ws[i * O + o];
      wy[n * O + o] = acc > 0 ? acc : 0.0f;
      float g = acc > 0 ? gys[n * O + o] : 0.0f;
      wgb[o] += g;
      for (int i = 0; i < I; ++i)
        wgx[n * I + i] += g * ws[i * O + o];
    }
  expectNear(read<float>(fwd[0]), wy, 1e-4f);
  expectNear(read<float>(grads[0]), wgx, 1e-4f);
  expectNear(read<float>(grads[1]), wgb, 1e-4f);
}

TEST_P(codegen_FusionRules, LargeSoftmaxRunsRowSplit) {
  // A softmax over [512, 256] (1 MiB read and written, above
  // LaunchExecutable::kSplitMinBytes): one row kernel, emitted row-split
  // (dim 0 dynamic), run on slices of rows by the OpenMP threads; every row
  // still equals the closed form.
  const int64_t R = 512, C = 256;
  GraphMaker m;
  int x = m.input({R, C});
  auto rowReduce = [&](OpKind k, int v) {
    return m.node(OpKind::Broadcast, {m.reduce(k, v, {1}, {R, 1}, /*keepdim=*/true)}, {R, C});
  };
  int e = m.same(OpKind::Exp, {m.same(OpKind::Sub, {x, rowReduce(OpKind::ReduceMax, x)})});
  int y = m.same(OpKind::Div, {e, rowReduce(OpKind::ReduceSum, e)});
  auto compiled = compileOk(m.done({y}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u);
  auto *launches = dynamic_cast<const runtime::LaunchExecutable *>(compiled.forward.get());
  ASSERT_TRUE(launches);
  EXPECT_EQ(launches->num_split_kernels(), 1);
  std::vector<float> xs = values(R * C, 9);
  auto res = runOk(*compiled.forward, {f32({R, C}, xs)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(R * C);
  for (int64_t i = 0; i < R; ++i) {
    float top = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < C; ++j)
      top = std::max(top, xs[i * C + j]);
    for (int64_t j = 0; j < C; ++j)
      sum += std::exp(xs[i * C + j] - top);
    for (int64_t j = 0; j < C; ++j)
      want[i * C + j] = std::exp(xs[i * C + j] - top) / sum;
  }
  expectNear(read<float>(res[0]), want);
}

TEST_P(codegen_FusionRules, ColumnSumIsNotRowSplit) {
  // sum(x, 0) reduces dim 0: its kernel keeps static shapes and one thread.
  GraphMaker m;
  int x = m.input({6, 4});
  int s = m.reduce(OpKind::ReduceSum, m.same(OpKind::Exp, {x}), {0}, {4});
  auto compiled = compileOk(m.done({s}));
  ASSERT_TRUE(compiled.forward);
  auto *launches = dynamic_cast<const runtime::LaunchExecutable *>(compiled.forward.get());
  ASSERT_TRUE(launches);
  EXPECT_EQ(launches->num_split_kernels(), 0);
  std::vector<float> xs = values(24, 3);
  auto res = runOk(*compiled.forward, {f32({6, 4}, xs)});
  std::vector<float> want(4, 0.0f);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j)
      want[j] += std::exp(xs[i * 4 + j]);
  expectNear(read<float>(res[0]), want);
}

namespace {

/// Compiles `graph` here (no kernel cache) with the IR dumped to a fresh
/// temporary directory, and returns the first kernel's IR after
/// kiln-cpu-merge-generics (the codegen-passes.mlir dump); empty on failure.
std::string fusedKernelIR(const ir::Graph &graph, const std::string &name, codegen::CompiledGraph *compiled) {
  const std::string dir = ::testing::TempDir() + name;
  std::filesystem::remove_all(dir);
  codegen::CompileOptions options;
  options.device = conformanceDevice();
  options.dump_ir_dir = dir;
  options.kernel_cache_dir = std::string(); // compile here, so the passes are dumped
  std::string error;
  EXPECT_TRUE(codegen::compileGraph(graph, options, compiled, &error)) << error;
  std::ifstream log(dir + "/codegen-passes.mlir");
  std::string line, kernel;
  bool inFused = false;
  while (std::getline(log, line)) {
    if (line.rfind("// -----// IR Dump After", 0) == 0) {
      if (inFused)
        break;
      inFused = line.find("(kiln-cpu-merge-generics)") != std::string::npos;
    } else if (inFused) {
      kernel += line + "\n";
    }
  }
  std::filesystem::remove_all(dir);
  return kernel;
}

} // namespace

TEST_P(codegen_FusionRules, ValueWithSeveralConsumersIsComputedOncePerElement) {
  // e = exp(x) feeds three ops and both results (the shape of a GELU
  // recomputed next to its derivative): the kernel's elementwise ops become
  // ONE linalg.generic with two results after kiln-cpu-merge-generics (no
  // full-size temporary per multi-use value), and the values still equal
  // the closed form.
  const int64_t N = 64, C = 48;
  GraphMaker m;
  int x = m.input({N, C});
  int e = m.same(OpKind::Exp, {x});
  int a = m.same(OpKind::Add, {e, m.constant({N, C}, 1.0)});
  int b = m.same(OpKind::Mul, {e, x});
  int c = m.same(OpKind::Div, {m.same(OpKind::Mul, {e, b}), a});
  codegen::CompiledGraph compiled;
  const std::string kernel = fusedKernelIR(m.done({b, c}), "kiln_merge_elementwise", &compiled);
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u);
  std::vector<float> xs = values(N * C, 5);
  auto res = runOk(*compiled.forward, {f32({N, C}, xs)});
  ASSERT_EQ(res.size(), 2u);
  std::vector<float> wb(N * C), wc(N * C);
  for (int64_t i = 0; i < N * C; ++i) {
    const float ex = std::exp(xs[i]);
    wb[i] = ex * xs[i];
    wc[i] = ex * wb[i] / (ex + 1.0f);
  }
  expectNear(read<float>(res[0]), wb);
  expectNear(read<float>(res[1]), wc);

  ASSERT_FALSE(kernel.empty());
  size_t generics = 0;
  for (size_t at = kernel.find("linalg.generic"); at != std::string::npos; at = kernel.find("linalg.generic", at + 1))
    ++generics;
  EXPECT_EQ(generics, 1u) << kernel;
}

TEST_P(codegen_FusionRules, ElementwiseKernelWritesOverDyingOperands) {
  // p = a @ w1 and q = a @ w2 (GEMM results, read only by the kernel) ->
  // one kernel with u = p * q + 1 and v = exp(p) - q: both results are
  // written over p and q (two in-place pairs: the kernel's branch for equal
  // addresses), then r = u @ w3 + v @ w3. Values against plain C++.
  const int64_t N = 64, K = 8, C = 32;
  GraphMaker m;
  int a = m.input({N, K}), w1 = m.input({K, C}), w2 = m.input({K, C}), w3 = m.input({C, 4});
  int p = m.node(OpKind::Matmul, {a, w1}, {N, C});
  int q = m.node(OpKind::Matmul, {a, w2}, {N, C});
  int u = m.same(OpKind::Add, {m.same(OpKind::Mul, {p, q}), m.constant({N, C}, 1.0)});
  int v = m.same(OpKind::Sub, {m.same(OpKind::Exp, {p}), q});
  int r = m.same(OpKind::Add, {m.node(OpKind::Matmul, {u, w3}, {N, 4}), m.node(OpKind::Matmul, {v, w3}, {N, 4})});
  auto compiled = compileOk(m.done({r}));
  ASSERT_TRUE(compiled.forward);
  auto *launches = dynamic_cast<const runtime::LaunchExecutable *>(compiled.forward.get());
  ASSERT_TRUE(launches);
  EXPECT_EQ(launches->num_in_place(), 2) << launches->describe();
  std::vector<float> as = values(N * K, 1), w1s = values(K * C, 2), w2s = values(K * C, 3), w3s = values(C * 4, 4);
  for (float &x : w1s)
    x *= 0.25f; // exp stays moderate
  auto res = runOk(*compiled.forward, {f32({N, K}, as), f32({K, C}, w1s), f32({K, C}, w2s), f32({C, 4}, w3s)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(N * 4, 0.0f);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) {
      float pv = 0.0f, qv = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        pv += as[i * K + k] * w1s[k * C + c];
        qv += as[i * K + k] * w2s[k * C + c];
      }
      const float uv = pv * qv + 1.0f, vv = std::exp(pv) - qv;
      for (int64_t o = 0; o < 4; ++o)
        want[i * 4 + o] += (uv + vv) * w3s[c * 4 + o];
    }
  expectNear(read<float>(res[0]), want, 1e-4f);
}

TEST_P(codegen_FusionRules, RowKernelComputesAllResultsInOneLoop) {
  // y = e / s with e = exp(x - max), s = sum(e), and its gradient as
  // autograd differentiates the division, dx = (g / s + sum(-g * e / s^2)) * e
  // (a softmax recomputed next to its backward, as under a memory budget;
  // dx does not read y): one row kernel, two [R, C] results, both computed
  // by the loop over row tiles (one result generic after
  // kiln-cpu-merge-generics, not a second pass over a kept exp); values
  // against the closed form dx = y * (g - sum(g * y)).
  const int64_t R = 48, C = 40;
  GraphMaker m;
  int x = m.input({R, C}), g = m.input({R, C});
  auto rowReduce = [&](OpKind k, int v) {
    return m.node(OpKind::Broadcast, {m.reduce(k, v, {1}, {R, 1}, /*keepdim=*/true)}, {R, C});
  };
  int e = m.same(OpKind::Exp, {m.same(OpKind::Sub, {x, rowReduce(OpKind::ReduceMax, x)})});
  int sb = rowReduce(OpKind::ReduceSum, e);
  int y = m.same(OpKind::Div, {e, sb});
  int ge = m.same(OpKind::Neg, {m.same(OpKind::Mul, {g, e})});
  int t2 = rowReduce(OpKind::ReduceSum, m.same(OpKind::Div, {ge, m.same(OpKind::Mul, {sb, sb})}));
  int dx = m.same(OpKind::Mul, {m.same(OpKind::Add, {m.same(OpKind::Div, {g, sb}), t2}), e});
  codegen::CompiledGraph compiled;
  const std::string kernel = fusedKernelIR(m.done({y, dx}), "kiln_row_results", &compiled);
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.fusions.size(), 1u);
  std::vector<float> xs = values(R * C, 6), gs = values(R * C, 7);
  auto res = runOk(*compiled.forward, {f32({R, C}, xs), f32({R, C}, gs)});
  ASSERT_EQ(res.size(), 2u);
  std::vector<float> wy(R * C), wdx(R * C);
  for (int64_t i = 0; i < R; ++i) {
    float top = -INFINITY, sum = 0.0f, dot = 0.0f;
    for (int64_t j = 0; j < C; ++j)
      top = std::max(top, xs[i * C + j]);
    for (int64_t j = 0; j < C; ++j)
      sum += std::exp(xs[i * C + j] - top);
    for (int64_t j = 0; j < C; ++j) {
      wy[i * C + j] = std::exp(xs[i * C + j] - top) / sum;
      dot += gs[i * C + j] * wy[i * C + j];
    }
    for (int64_t j = 0; j < C; ++j)
      wdx[i * C + j] = wy[i * C + j] * (gs[i * C + j] - dot);
  }
  expectNear(read<float>(res[0]), wy);
  expectNear(read<float>(res[1]), wdx);

  // After kiln-cpu-merge-generics: one generic yields both [R, C] results.
  const std::string both = "-> (tensor<48x40xf32>, tensor<48x40xf32>)";
  const std::string bothSplit = "-> (tensor<?x40xf32>, tensor<?x40xf32>)"; // row-split kernels: dim 0 dynamic
  EXPECT_TRUE(kernel.find(both) != std::string::npos || kernel.find(bothSplit) != std::string::npos) << kernel;
}
