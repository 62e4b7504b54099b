// End-to-end: small ir::Graphs through compileGraph (GraphBuilder, pipeline,
// kernels, JIT, LaunchExecutable), checked against plain C++ references.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "kiln/codegen/Compiler.h"
#include "kiln/runtime/LaunchExecutable.h"
#include "GraphTestUtils.h"

using namespace kiln;
using kiln::ir::ElementType;
using kiln::ir::OpKind;
using runtime::TensorView;

namespace {

using namespace kiln::codegen_test;

/// Compiles `out = kind(x, y)` (or kind(x) if unary) on [3, 5] and checks it.
void checkElementwise(OpKind kind, std::function<float(float, float)> ref, bool unary, bool positive = false) {
  SCOPED_TRACE(ir::toString(kind));
  GraphMaker m;
  int x = m.input({3, 5}), y = unary ? -1 : m.input({3, 5});
  int out = unary ? m.same(kind, {x}) : m.same(kind, {x, y});
  auto compiled = compileOk(m.done({out}));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(15, 1), ys = values(15, 2);
  if (positive)
    for (auto &v : xs)
      v = std::fabs(v);
  std::vector<TensorView> in = {f32({3, 5}, xs)};
  if (!unary)
    in.push_back(f32({3, 5}, ys));
  auto res = runOk(*compiled.forward, in);
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(15);
  for (int i = 0; i < 15; ++i)
    want[i] = ref(xs[i], ys[i]);
  expectNear(read<float>(res[0]), want);
}

} // namespace

class codegen_Compile : public ConformanceTest {};
INSTANTIATE_TEST_SUITE_P(cpu, codegen_Compile, ::testing::Values(DeviceType::CPU), deviceName);
INSTANTIATE_TEST_SUITE_P(checking, codegen_Compile, ::testing::Values(DeviceType::PrivateUse1), deviceName);

TEST_P(codegen_Compile, BinaryElementwise) {
  checkElementwise(
      OpKind::Add, [](float a, float b) { return a + b; }, false);
  checkElementwise(
      OpKind::Sub, [](float a, float b) { return a - b; }, false);
  checkElementwise(
      OpKind::Mul, [](float a, float b) { return a * b; }, false);
  checkElementwise(
      OpKind::Div, [](float a, float b) { return a / b; }, false);
}

TEST_P(codegen_Compile, UnaryElementwise) {
  checkElementwise(
      OpKind::Neg, [](float a, float) { return -a; }, true);
  checkElementwise(
      OpKind::Exp, [](float a, float) { return std::exp(a); }, true);
  checkElementwise(
      OpKind::Log, [](float a, float) { return std::log(a); }, true, true);
  checkElementwise(
      OpKind::Relu, [](float a, float) { return a > 0 ? a : 0.0f; }, true);
}

TEST_P(codegen_Compile, FusedChainWithStridedInput) {
  // out = exp(x * y - x), x arriving as a transposed view.
  GraphMaker m;
  int x = m.input({3, 5}), y = m.input({3, 5});
  int out = m.same(OpKind::Exp, {m.same(OpKind::Sub, {m.same(OpKind::Mul, {x, y}), x})});
  auto compiled = compileOk(m.done({out}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.forward->num_launches(), 1);
  ASSERT_EQ(compiled.fusions.size(), 1u);
  EXPECT_EQ(compiled.fusions[0].num_ops, 3);
  EXPECT_EQ(compiled.fusions[0].bytes_read, 2 * 15 * 4);
  EXPECT_EQ(compiled.fusions[0].bytes_written, 15 * 4);

  std::vector<float> base = values(15, 3), ys = values(15, 4);
  TensorView xt = f32({5, 3}, base); // x[i][j] = base[j][i]
  xt.sizes = {3, 5};
  xt.strides = {1, 3};
  auto res = runOk(*compiled.forward, {xt, f32({3, 5}, ys)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(15);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      float xv = base[j * 3 + i], yv = ys[i * 5 + j];
      want[i * 5 + j] = std::exp(xv * yv - xv);
    }
  expectNear(read<float>(res[0]), want);
}

TEST_P(codegen_Compile, CompareSelectConvert) {
  GraphMaker m;
  int x = m.input({4, 3}), y = m.input({4, 3});
  auto cmp = [&](ir::Predicate p) {
    return m.node(OpKind::Compare, {x, y}, {4, 3}, ElementType::Bool, [p](ir::Node &n) { n.predicate = p; });
  };
  int lt = cmp(ir::Predicate::LT);
  int sel = m.node(OpKind::Select, {lt, x, y}, {4, 3}, ElementType::F32); // min
  int asf = m.node(OpKind::Convert, {lt}, {4, 3}, ElementType::F32);
  int asi = m.node(OpKind::Convert, {m.same(OpKind::Mul, {x, y})}, {4, 3}, ElementType::I64);
  int back = m.node(OpKind::Convert, {asi}, {4, 3}, ElementType::F32);
  int nz = m.node(OpKind::Convert, {m.same(OpKind::Relu, {x})}, {4, 3}, ElementType::Bool);
  std::vector<int> preds;
  for (auto p : {ir::Predicate::EQ, ir::Predicate::NE, ir::Predicate::LE, ir::Predicate::GT, ir::Predicate::GE})
    preds.push_back(cmp(p));
  std::vector<int> outs = {lt, sel, asf, asi, back, nz};
  outs.insert(outs.end(), preds.begin(), preds.end());
  auto compiled = compileOk(m.done(outs));
  ASSERT_TRUE(compiled.forward);

  std::vector<float> xs = values(12, 5), ys = values(12, 6);
  xs[3] = ys[3] = 1.5f; // one equal pair
  auto res = runOk(*compiled.forward, {f32({4, 3}, xs), f32({4, 3}, ys)});
  ASSERT_EQ(res.size(), outs.size());
  EXPECT_EQ(res[0].dtype, kBool);
  EXPECT_EQ(res[3].dtype, kInt64);
  auto ltv = read<uint8_t>(res[0]);
  auto selv = read<float>(res[1]), asfv = read<float>(res[2]), backv = read<float>(res[4]);
  auto asiv = read<int64_t>(res[3]);
  auto nzv = read<uint8_t>(res[5]);
  for (int i = 0; i < 12; ++i) {
    float a = xs[i], b = ys[i];
    EXPECT_EQ(ltv[i], a < b ? 1 : 0) << i;
    EXPECT_EQ(selv[i], a < b ? a : b) << i;
    EXPECT_EQ(asfv[i], a < b ? 1.0f : 0.0f) << i;
    EXPECT_EQ(asiv[i], static_cast<int64_t>(a * b)) << i; // truncation toward zero
    EXPECT_EQ(backv[i], static_cast<float>(static_cast<int64_t>(a * b))) << i;
    EXPECT_EQ(nzv[i], a > 0 ? 1 : 0) << i;
    const bool want[5] = {a == b, a != b, a <= b, a > b, a >= b};
    for (int p = 0; p < 5; ++p)
      EXPECT_EQ(read<uint8_t>(res[6 + p])[i], want[p] ? 1 : 0) << i;
  }
}

TEST_P(codegen_Compile, BoolInputAndInt64Arithmetic) {
  GraphMaker m;
  int c = m.input({6}, ElementType::Bool);
  int a = m.input({6}, ElementType::I64), b = m.input({6}, ElementType::I64);
  int s = m.node(OpKind::Select, {c, a, b}, {6}, ElementType::I64);
  int t = m.same(OpKind::Add, {m.same(OpKind::Mul, {s, a}), m.same(OpKind::Neg, {b})});
  int mx = m.node(OpKind::ReduceMax, {t}, {}, ElementType::I64, [](ir::Node &n) { n.ints = {0}; });
  int sm = m.node(OpKind::ReduceSum, {t}, {}, ElementType::I64, [](ir::Node &n) { n.ints = {0}; });
  auto compiled = compileOk(m.done({t, mx, sm}));
  ASSERT_TRUE(compiled.forward);
  std::vector<uint8_t> cs = {1, 0, 1, 1, 0, 0};
  std::vector<int64_t> as = {1, -2, 3, 40, 5, -6}, bs = {7, 8, -9, 10, 11, 12};
  auto res = runOk(*compiled.forward,
                   {tensor(Shape{6}, cs, kBool), tensor(Shape{6}, as, kInt64), tensor(Shape{6}, bs, kInt64)});
  ASSERT_EQ(res.size(), 3u);
  auto tv = read<int64_t>(res[0]);
  int64_t wantMax = INT64_MIN, wantSum = 0;
  for (int i = 0; i < 6; ++i) {
    int64_t w = (cs[i] ? as[i] : bs[i]) * as[i] - bs[i];
    EXPECT_EQ(tv[i], w);
    wantMax = std::max(wantMax, w);
    wantSum += w;
  }
  EXPECT_EQ(res[1].sizes, Shape{});
  EXPECT_EQ(read<int64_t>(res[1])[0], wantMax);
  EXPECT_EQ(read<int64_t>(res[2])[0], wantSum);
}

TEST_P(codegen_Compile, Reductions) {
  // x: [2, 3, 4]; sum/max over {1}, {0, 2}, {2} keepdim, all dims.
  GraphMaker m;
  int x = m.input({2, 3, 4});
  auto reduce = [&](OpKind k, std::vector<int64_t> dims, Shape shape, bool keep) {
    return m.node(k, {x}, std::move(shape), ElementType::F32, [&](ir::Node &n) {
      n.ints = dims;
      n.keepdim = keep;
    });
  };
  std::vector<int> outs = {
      reduce(OpKind::ReduceSum, {1}, {2, 4}, false),   reduce(OpKind::ReduceSum, {0, 2}, {3}, false),
      reduce(OpKind::ReduceSum, {2}, {2, 3, 1}, true), reduce(OpKind::ReduceSum, {0, 1, 2}, {}, false),
      reduce(OpKind::ReduceMax, {1}, {2, 4}, false),   reduce(OpKind::ReduceMax, {0, 2}, {3}, false),
      reduce(OpKind::ReduceMax, {2}, {2, 3, 1}, true), reduce(OpKind::ReduceMax, {0, 1, 2}, {}, false),
  };
  auto compiled = compileOk(m.done(outs));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(24, 7);
  auto res = runOk(*compiled.forward, {f32({2, 3, 4}, xs)});
  ASSERT_EQ(res.size(), outs.size());
  auto X = [&](int i, int j, int k) { return xs[(i * 3 + j) * 4 + k]; };
  for (int max = 0; max < 2; ++max) {
    auto combine = [&](float acc, float v) { return max ? std::max(acc, v) : acc + v; };
    const float init = max ? -INFINITY : 0.0f;
    std::vector<float> r1(8, init), r02(3, init), r2(6, init), rall(1, init);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k) {
          float v = X(i, j, k);
          r1[i * 4 + k] = combine(r1[i * 4 + k], v);
          r02[j] = combine(r02[j], v);
          r2[i * 3 + j] = combine(r2[i * 3 + j], v);
          rall[0] = combine(rall[0], v);
        }
    const int o = 4 * max;
    EXPECT_EQ(res[o + 2].sizes, (Shape{2, 3, 1}));
    EXPECT_EQ(res[o + 3].sizes, Shape{});
    expectNear(read<float>(res[o + 0]), r1);
    expectNear(read<float>(res[o + 1]), r02);
    expectNear(read<float>(res[o + 2]), r2);
    expectNear(read<float>(res[o + 3]), rall);
  }
}

TEST_P(codegen_Compile, SoftmaxLikeReductionThenElementwise) {
  // y = exp(x - max(x, 1)) / sum(exp(x - max(x, 1)), 1): reductions feeding
  // elementwise ops through broadcasts.
  GraphMaker m;
  int x = m.input({4, 6});
  auto rowReduce = [&](OpKind k, int v) {
    int r = m.node(k, {v}, {4, 1}, ElementType::F32, [](ir::Node &n) {
      n.ints = {1};
      n.keepdim = true;
    });
    return m.node(OpKind::Broadcast, {r}, {4, 6}, ElementType::F32);
  };
  int e = m.same(OpKind::Exp, {m.same(OpKind::Sub, {x, rowReduce(OpKind::ReduceMax, x)})});
  int y = m.same(OpKind::Div, {e, rowReduce(OpKind::ReduceSum, e)});
  auto compiled = compileOk(m.done({y}));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(24, 8);
  auto res = runOk(*compiled.forward, {f32({4, 6}, xs)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(24);
  for (int i = 0; i < 4; ++i) {
    float mx = -INFINITY, sum = 0;
    for (int j = 0; j < 6; ++j)
      mx = std::max(mx, xs[i * 6 + j]);
    for (int j = 0; j < 6; ++j)
      sum += std::exp(xs[i * 6 + j] - mx);
    for (int j = 0; j < 6; ++j)
      want[i * 6 + j] = std::exp(xs[i * 6 + j] - mx) / sum;
  }
  expectNear(read<float>(res[0]), want);
}

TEST_P(codegen_Compile, MatmulWithTransposedOperand) {
  GraphMaker m;
  int x = m.input({3, 4}), w = m.input({5, 4});
  int wt = m.node(OpKind::Transpose, {w}, {4, 5}, ElementType::F32, [](ir::Node &n) { n.ints = {1, 0}; });
  int y = m.node(OpKind::Matmul, {x, wt}, {3, 5}, ElementType::F32);
  auto compiled = compileOk(m.done({y}));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(12, 9), ws = values(20, 10);
  auto res = runOk(*compiled.forward, {f32({3, 4}, xs), f32({5, 4}, ws)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(15, 0.0f);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 4; ++k)
        want[i * 5 + j] += xs[i * 4 + k] * ws[j * 4 + k];
  expectNear(read<float>(res[0]), want, 1e-4f);
}

TEST_P(codegen_Compile, BroadcastAdd) {
  GraphMaker m;
  int x = m.input({3, 5}), b = m.input({5}), c = m.input({3, 1});
  int bb = m.node(OpKind::Broadcast, {b}, {3, 5}, ElementType::F32);
  int cb = m.node(OpKind::Broadcast, {c}, {3, 5}, ElementType::F32);
  int y = m.same(OpKind::Add, {m.same(OpKind::Add, {x, bb}), cb});
  auto compiled = compileOk(m.done({y}));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(15, 11), bs = values(5, 12), cs = values(3, 13);
  auto res = runOk(*compiled.forward, {f32({3, 5}, xs), f32({5}, bs), f32({3, 1}, cs)});
  ASSERT_EQ(res.size(), 1u);
  std::vector<float> want(15);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      want[i * 5 + j] = xs[i * 5 + j] + bs[j] + cs[i];
  expectNear(read<float>(res[0]), want);
}

/// The joint graph of y = relu(x w^T + b), x [4, 3], w [5, 3], b [5], with
/// the backward of tangent gy [4, 5]:
///   gz = gy * (z > 0); gw = gz^T x; gb = sum(gz, 0); gx = gz w.
/// Outputs: y, then the gradients gx, gw, gb.
static ir::Graph jointLinearRelu() {
  const int64_t N = 4, I = 3, O = 5;
  GraphMaker m;
  int x = m.input({N, I}), w = m.input({O, I}), b = m.input({O});
  int gy = m.input({N, O}, ElementType::F32, ir::InputRole::Tangent);
  auto transpose = [&](int v, Shape shape) {
    return m.node(OpKind::Transpose, {v}, std::move(shape), ElementType::F32, [](ir::Node &n) { n.ints = {1, 0}; });
  };
  int h = m.node(OpKind::Matmul, {x, transpose(w, {I, O})}, {N, O}, ElementType::F32);
  int z = m.same(OpKind::Add, {h, m.node(OpKind::Broadcast, {b}, {N, O}, ElementType::F32)});
  int y = m.same(OpKind::Relu, {z});
  int zero = m.node(OpKind::Constant, {}, {N, O}, ElementType::F32, [](ir::Node &n) { n.scalar = 0.0; });
  int mask = m.node(OpKind::Compare, {z, zero}, {N, O}, ElementType::Bool,
                    [](ir::Node &n) { n.predicate = ir::Predicate::GT; });
  int gz = m.node(OpKind::Select, {mask, gy, zero}, {N, O}, ElementType::F32);
  int gx = m.node(OpKind::Matmul, {gz, w}, {N, I}, ElementType::F32);
  int gw = m.node(OpKind::Matmul, {transpose(gz, {O, N}), x}, {O, I}, ElementType::F32);
  int gb = m.node(OpKind::ReduceSum, {gz}, {O}, ElementType::F32, [](ir::Node &n) { n.ints = {0}; });
  ir::Graph graph = m.done({y, gx, gw, gb}, 1);
  return graph;
}

TEST_P(codegen_Compile, JointLinearReluForwardAndBackward) {
  const int64_t N = 4, I = 3, O = 5;
  ir::Graph graph = jointLinearRelu();

  auto start = std::chrono::steady_clock::now();
  auto compiled = compileOk(graph);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("compile_ms", std::to_string(ms));
  printf("[ info ] joint linear+relu compile: %.1f ms, %zu kernels\n", ms, compiled.fusions.size());
  ASSERT_TRUE(compiled.forward);
  ASSERT_TRUE(compiled.backward);
  EXPECT_EQ(compiled.num_forward_outputs, 1);

  std::vector<float> xs = values(N * I, 14), ws = values(O * I, 15), bs = values(O, 16), gys = values(N * O, 17);
  std::vector<TensorView> primals = {f32({N, I}, xs), f32({O, I}, ws), f32({O}, bs)};
  auto fwd = runOk(*compiled.forward, primals);
  ASSERT_EQ(fwd.size(), static_cast<size_t>(1 + compiled.num_saved));

  // Reference.
  std::vector<float> zr(N * O), yr(N * O), gzr(N * O), gxr(N * I, 0), gwr(O * I, 0), gbr(O, 0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      float acc = bs[o];
      for (int i = 0; i < I; ++i)
        acc += xs[n * I + i] * ws[o * I + i];
      zr[n * O + o] = acc;
      yr[n * O + o] = acc > 0 ? acc : 0;
      gzr[n * O + o] = acc > 0 ? gys[n * O + o] : 0;
    }
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      gbr[o] += gzr[n * O + o];
      for (int i = 0; i < I; ++i) {
        gxr[n * I + i] += gzr[n * O + o] * ws[o * I + i];
        gwr[o * I + i] += gzr[n * O + o] * xs[n * I + i];
      }
    }
  expectNear(read<float>(fwd[0]), yr, 1e-4f);

  std::vector<TensorView> bwdIn = primals;
  bwdIn.insert(bwdIn.end(), fwd.begin() + 1, fwd.end()); // saved
  bwdIn.push_back(f32({N, O}, gys));
  auto grads = runOk(*compiled.backward, bwdIn);
  ASSERT_EQ(grads.size(), 3u);
  expectNear(read<float>(grads[0]), gxr, 1e-4f);
  expectNear(read<float>(grads[1]), gwr, 1e-4f);
  expectNear(read<float>(grads[2]), gbr, 1e-4f);

  // Runs are independent: a second run gives the same answer.
  auto again = runOk(*compiled.backward, bwdIn);
  ASSERT_EQ(again.size(), 3u);
  expectNear(read<float>(again[1]), gwr, 1e-4f);
}

/// RunHooks on a compiled backward (the seam of the DDP reducer):
/// on_output_ready fires once per gradient, in the order of the launches
/// that write them, while the run is still going (the first gradient is
/// ready before the last launch), and all before run() returns. Launches
/// are counted by the checking device's backend.
TEST(codegen_CompiledBackward, OutputReadyFiresOncePerGradientInLaunchOrderBeforeTheRunEnds) {
  installCheckingDevice();
  conformanceDevice() = Device(DeviceType::PrivateUse1, 0);
  auto *checking = static_cast<kiln::testing::CheckingBackend *>(runtime::find_backend(DeviceType::PrivateUse1));
  auto compiled = compileOk(jointLinearRelu());
  ASSERT_TRUE(compiled.backward);
  std::vector<TensorView> args = {f32({4, 3}, values(12, 1)), f32({5, 3}, values(15, 2)), f32({5}, values(5, 3))};
  auto fwd = runOk(*compiled.forward, args);
  args.insert(args.end(), fwd.begin() + 1, fwd.end()); // saved
  args.push_back(f32({4, 5}, values(20, 4)));
  auto bwd = std::dynamic_pointer_cast<runtime::LaunchExecutable>(compiled.backward);
  ASSERT_TRUE(bwd);

  auto work = [&] { return checking->launches() + checking->gemms() + checking->copies(); };
  struct Ready {
    int output;
    int64_t work_done;
  };
  std::vector<Ready> ready;
  bool returned = false;
  runtime::RunHooks hooks;
  hooks.on_output_ready = [&](int i, const TensorView &) {
    EXPECT_FALSE(returned);
    ready.push_back({i, work()});
  };
  const int64_t before = work();
  std::string error;
  auto grads = bwd->run(args, &error, &hooks);
  returned = true;
  ASSERT_EQ(grads.size(), 3u) << error;
  const int64_t total = work() - before;
  ASSERT_EQ(ready.size(), 3u);
  std::vector<int> seen;
  for (size_t k = 0; k < ready.size(); ++k) {
    seen.push_back(ready[k].output);
    if (k > 0)
      EXPECT_GE(ready[k].work_done, ready[k - 1].work_done) << "launch order";
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2})) << "once per gradient";
  EXPECT_LT(ready.front().work_done - before, total) << "the first gradient is ready before the run ends";
  conformanceDevice() = kCPU;
}

/// Compiles y = relu(x w) (+ 1 when `plus_one`) with a backward that reads
/// h = relu(x w), without kiln-remat (h is saved).
static codegen::CompiledGraph compileSavingH(bool plus_one) {
  const int64_t N = 4, I = 3, O = 6;
  GraphMaker m;
  int x = m.input({N, I}), w = m.input({I, O});
  int gy = m.input({N, O}, ElementType::F32, ir::InputRole::Tangent);
  int h = m.same(OpKind::Relu, {m.node(OpKind::Matmul, {x, w}, {N, O}, ElementType::F32)});
  int one = m.node(OpKind::Constant, {}, {N, O}, ElementType::F32, [](ir::Node &n) { n.scalar = 1.0; });
  int y = plus_one ? m.same(OpKind::Add, {h, one}) : h;
  // A stand-in gradient that reads h in backward: (h^T gy).
  int ht = m.node(OpKind::Transpose, {h}, {O, N}, ElementType::F32, [](ir::Node &n) { n.ints = {1, 0}; });
  int a = m.node(OpKind::Matmul, {ht, gy}, {O, O}, ElementType::F32);
  codegen::CompiledGraph compiled;
  std::string error;
  codegen::CompileOptions options;
  options.device = conformanceDevice();
  options.remat = false;
  EXPECT_TRUE(codegen::compileGraph(m.done({y, a}, 1), options, &compiled, &error)) << error;
  return compiled;
}

TEST_P(codegen_Compile, OnlyPrivateSavedActivationsAreDonatable) {
  // Saved h is donatable (codegen marks it, run_donating reuses it) when
  // its buffer is its own; not when h is also the forward output (the
  // caller holds it).
  for (bool plus_one : {true, false}) {
    SCOPED_TRACE(plus_one ? "y = h + 1" : "y = h");
    codegen::CompiledGraph compiled = compileSavingH(plus_one);
    auto bwd = std::dynamic_pointer_cast<runtime::LaunchExecutable>(compiled.backward);
    ASSERT_TRUE(bwd);
    // Inputs: x, w, the saved h, gy.
    ASSERT_EQ(compiled.num_saved, 1) << bwd->describe();
    EXPECT_EQ(bwd->slot_types()[2].sizes, (std::vector<int64_t>{4, 6}));
    EXPECT_FALSE(bwd->input_donatable(0));
    EXPECT_FALSE(bwd->input_donatable(1));
    EXPECT_EQ(bwd->input_donatable(2), plus_one) << bwd->describe();
    EXPECT_FALSE(bwd->input_donatable(3));

    // run_donating (the args hold the only references) gives what run gives.
    std::vector<TensorView> primals = {f32({4, 3}, values(12, 3)), f32({3, 6}, values(18, 4))};
    auto fwd = runOk(*compiled.forward, primals);
    ASSERT_EQ(fwd.size(), 2u);
    std::vector<TensorView> args = primals;
    args.push_back(fwd[1]);
    args.push_back(f32({4, 6}, values(24, 5)));
    auto want = runOk(*compiled.backward, args);
    fwd.clear();
    std::string error;
    auto got = compiled.backward->run_donating(args, &error);
    ASSERT_EQ(got.size(), want.size()) << error;
    for (size_t i = 0; i < want.size(); ++i)
      expectNear(read<float>(got[i]), read<float>(want[i]));
  }
}

TEST_P(codegen_Compile, ResultsMayAliasInputs) {
  // A transposed parameter returned as is: a view of the input, no copy.
  GraphMaker m;
  int w = m.input({2, 3});
  int wt = m.node(OpKind::Transpose, {w}, {3, 2}, ElementType::F32, [](ir::Node &n) { n.ints = {1, 0}; });
  auto compiled = compileOk(m.done({wt, w}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.forward->num_launches(), 0);
  TensorView in = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  auto res = runOk(*compiled.forward, {in});
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0].buffer, in.buffer);
  EXPECT_EQ(read<float>(res[0]), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST_P(codegen_Compile, ErrorsAreMessagesNotCrashes) {
  { // mismatched run-time input
    GraphMaker m;
    int x = m.input({2, 2});
    auto compiled = compileOk(m.done({m.same(OpKind::Exp, {x})}));
    ASSERT_TRUE(compiled.forward);
    std::string error;
    EXPECT_TRUE(compiled.forward->run({f32({4}, {1, 2, 3, 4})}, &error).empty());
    EXPECT_NE(error.find("expected float32 [2, 2]"), std::string::npos) << error;
  }
  { // a bad graph: operand index out of range
    GraphMaker m;
    int x = m.input({2, 2});
    m.node(OpKind::Add, {x, 42}, {2, 2}, ElementType::F32);
    codegen::CompiledGraph compiled;
    std::string error;
    EXPECT_FALSE(codegen::compileGraph(m.done({x}), conformanceOptions(), &compiled, &error));
    EXPECT_FALSE(error.empty());
  }
}

TEST_P(codegen_Compile, ConstantsAndScalarInputs) {
  // y = broadcast(x: rank 0) * 3; the constant itself is also a result.
  GraphMaker m;
  int x = m.input({});
  int c = m.node(OpKind::Constant, {}, {2, 2}, ElementType::F32, [](ir::Node &n) { n.scalar = 3.0; });
  int xb = m.node(OpKind::Broadcast, {x}, {2, 2}, ElementType::F32);
  int y = m.same(OpKind::Mul, {xb, c});
  auto compiled = compileOk(m.done({y, c}));
  ASSERT_TRUE(compiled.forward);
  auto res = runOk(*compiled.forward, {f32({}, {1.5f})});
  ASSERT_EQ(res.size(), 2u);
  expectNear(read<float>(res[0]), {4.5f, 4.5f, 4.5f, 4.5f});
  expectNear(read<float>(res[1]), {3, 3, 3, 3});
}

TEST_P(codegen_Compile, MathUnaryElementwise) {
  checkElementwise(
      OpKind::Sqrt, [](float a, float) { return std::sqrt(a); }, true, true);
  checkElementwise(
      OpKind::Rsqrt, [](float a, float) { return 1.0f / std::sqrt(a); }, true, true);
  checkElementwise(
      OpKind::Tanh, [](float a, float) { return std::tanh(a); }, true);
  checkElementwise(
      OpKind::Abs, [](float a, float) { return std::fabs(a); }, true);
  checkElementwise(
      OpKind::Sin, [](float a, float) { return std::sin(a); }, true);
  checkElementwise(
      OpKind::Cos, [](float a, float) { return std::cos(a); }, true);
}

TEST_P(codegen_Compile, MathApproximationsOverWideRanges) {
  // tanh/sin/cos are polynomial approximations: check them (and sqrt) on
  // 4096 points over wide ranges, including tanh's saturated tails.
  GraphMaker m;
  const int64_t n = 4096;
  int x = m.input({n});
  std::vector<int> outs = {m.same(OpKind::Tanh, {x}), m.same(OpKind::Sin, {x}), m.same(OpKind::Cos, {x}),
                           m.same(OpKind::Abs, {x})};
  auto compiled = compileOk(m.done(outs));
  ASSERT_TRUE(compiled.forward);
  ASSERT_EQ(compiled.fusions.size(), 1u);  // siblings reading x: one multi-output kernel
  std::vector<float> xs(n);
  for (int64_t i = 0; i < n; ++i)
    xs[i] = -20.0f + 40.0f * static_cast<float>(i) / static_cast<float>(n - 1);
  auto res = runOk(*compiled.forward, {f32({n}, xs)});
  ASSERT_EQ(res.size(), 4u);
  std::vector<float> wt(n), ws(n), wc(n), wa(n);
  for (int64_t i = 0; i < n; ++i) {
    wt[i] = std::tanh(xs[i]);
    ws[i] = std::sin(xs[i]);
    wc[i] = std::cos(xs[i]);
    wa[i] = std::fabs(xs[i]);
  }
  expectNear(read<float>(res[0]), wt, 2e-6f);
  expectNear(read<float>(res[1]), ws, 2e-6f);
  expectNear(read<float>(res[2]), wc, 2e-6f);
  expectNear(read<float>(res[3]), wa, 0.0f);
}

TEST_P(codegen_Compile, PowByConstantExponent) {
  const std::vector<double> exponents = {0.0, 1.0, 2.0, 3.0, 5.0, -1.0, -2.0, 0.5, -0.5, 1.7, -2.5};
  GraphMaker m;
  int x = m.input({3, 5});
  std::vector<int> outs;
  for (double e : exponents)
    outs.push_back(m.node(OpKind::Pow, {x}, {3, 5}, ElementType::F32, [e](ir::Node &n) { n.scalar = e; }));
  auto compiled = compileOk(m.done(outs));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = values(15, 11);
  for (auto &v : xs)
    v = std::fabs(v) + 0.25f; // positive: non-integral exponents are defined
  auto res = runOk(*compiled.forward, {f32({3, 5}, xs)});
  ASSERT_EQ(res.size(), exponents.size());
  for (size_t k = 0; k < exponents.size(); ++k) {
    SCOPED_TRACE("exponent " + std::to_string(exponents[k]));
    std::vector<float> want(15);
    for (int i = 0; i < 15; ++i)
      want[i] = std::pow(xs[i], static_cast<float>(exponents[k]));
    expectNear(read<float>(res[k]), want, 2e-6f);
  }
}

TEST_P(codegen_Compile, PowOfNegativeBase) {
  // torch.pow semantics: integral exponents are defined for negative bases,
  // non-integral ones give NaN; x ^ 0 is 1.
  GraphMaker m;
  int x = m.input({4});
  int p3 = m.node(OpKind::Pow, {x}, {4}, ElementType::F32, [](ir::Node &n) { n.scalar = 3.0; });
  int pm2 = m.node(OpKind::Pow, {x}, {4}, ElementType::F32, [](ir::Node &n) { n.scalar = -2.0; });
  int ph = m.node(OpKind::Pow, {x}, {4}, ElementType::F32, [](ir::Node &n) { n.scalar = 1.5; });
  int p0 = m.node(OpKind::Pow, {x}, {4}, ElementType::F32, [](ir::Node &n) { n.scalar = 0.0; });
  auto compiled = compileOk(m.done({p3, pm2, ph, p0}));
  ASSERT_TRUE(compiled.forward);
  std::vector<float> xs = {-2.0f, -0.5f, 1.5f, 3.0f};
  auto res = runOk(*compiled.forward, {f32({4}, xs)});
  ASSERT_EQ(res.size(), 4u);
  expectNear(read<float>(res[0]), {-8.0f, -0.125f, 3.375f, 27.0f});
  expectNear(read<float>(res[1]), {0.25f, 4.0f, 1.0f / 2.25f, 1.0f / 9.0f});
  auto half = read<float>(res[2]);
  EXPECT_TRUE(std::isnan(half[0]) && std::isnan(half[1]));
  EXPECT_NEAR(half[2], std::pow(1.5f, 1.5f), 1e-5f);
  EXPECT_NEAR(half[3], std::pow(3.0f, 1.5f), 1e-5f);
  expectNear(read<float>(res[3]), {1.0f, 1.0f, 1.0f, 1.0f});
}

namespace {

/// want[b] = A[b] x B[b] with element accessors (any layout).
std::vector<float> batchedReference(int64_t B, int64_t M, int64_t K, int64_t N,
                                    const std::function<float(int64_t, int64_t, int64_t)> &a,
                                    const std::function<float(int64_t, int64_t, int64_t)> &b) {
  std::vector<float> want(B * M * N, 0.0f);
  for (int64_t s = 0; s < B; ++s)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k)
          acc += static_cast<double>(a(s, i, k)) * b(s, k, j);
        want[(s * M + i) * N + j] = static_cast<float>(acc);
      }
  return want;
}

} // namespace

TEST_P(codegen_Compile, BatchedMatmul) {
  const int64_t B = 3, M = 4, K = 5, N = 6;
  GraphMaker m;
  int a = m.input({B, M, K}), b = m.input({B, K, N});
  int y = m.node(OpKind::Matmul, {a, b}, {B, M, N}, ElementType::F32);
  int z = m.same(OpKind::Tanh, {y}); // and a kernel consuming the GEMM result
  auto compiled = compileOk(m.done({y, z}));
  ASSERT_TRUE(compiled.forward);
  EXPECT_EQ(compiled.forward->num_launches(), 2);
  std::vector<float> as = values(B * M * K, 12), bs = values(B * K * N, 13);
  auto res = runOk(*compiled.forward, {f32({B, M, K}, as), f32({B, K, N}, bs)});
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0].sizes, (Shape{B, M, N}));
  auto want = batchedReference(
      B, M, K, N, [&](int64_t s, int64_t i, int64_t k) { return as[(s * M + i) * K + k]; },
      [&](int64_t s, int64_t k, int64_t j) { return bs[(s * K + k) * N + j]; });
  expectNear(read<float>(res[0]), want, 1e-5f);
  for (auto &v : want)
    v = std::tanh(v);
  expectNear(read<float>(res[1]), want, 1e-5f);
}

TEST_P(codegen_Compile, BatchedMatmulWithTransposedAndBroadcastOperands) {
  // y = a x transpose(w, [0, 2, 1]) with w [B, N, K]; u = transpose(a) x c
  // with c a [K', N] matrix broadcast over the batch (batch stride 0); and a
  // strided (transposed) run-time input for a.
  const int64_t B = 2, M = 3, K = 4, N = 5;
  GraphMaker m;
  int a = m.input({B, M, K}), w = m.input({B, N, K}), c = m.input({M, N});
  int wt = m.node(OpKind::Transpose, {w}, {B, K, N}, ElementType::F32, [](ir::Node &n) { n.ints = {0, 2, 1}; });
  int y = m.node(OpKind::Matmul, {a, wt}, {B, M, N}, ElementType::F32);
  int at = m.node(OpKind::Transpose, {a}, {B, K, M}, ElementType::F32, [](ir::Node &n) { n.ints = {0, 2, 1}; });
  int cb = m.node(OpKind::Broadcast, {c}, {B, M, N}, ElementType::F32);
  int u = m.node(OpKind::Matmul, {at, cb}, {B, K, N}, ElementType::F32);
  auto compiled = compileOk(m.done({y, u}));
  ASSERT_TRUE(compiled.forward);

  // a arrives as a view: base [B, K, M] with the last two dims swapped.
  std::vector<float> abase = values(B * K * M, 14), ws = values(B * N * K, 15), cs = values(M * N, 16);
  TensorView av = f32({B, K, M}, abase);
  av.sizes = {B, M, K};
  av.strides = {K * M, 1, M};
  auto A = [&](int64_t s, int64_t i, int64_t k) { return abase[(s * K + k) * M + i]; };
  auto res = runOk(*compiled.forward, {av, f32({B, N, K}, ws), f32({M, N}, cs)});
  ASSERT_EQ(res.size(), 2u);
  expectNear(read<float>(res[0]),
             batchedReference(
                 B, M, K, N, A, [&](int64_t s, int64_t k, int64_t j) { return ws[(s * N + j) * K + k]; }),
             1e-5f);
  expectNear(read<float>(res[1]),
             batchedReference(
                 B, K, M, N, [&](int64_t s, int64_t k, int64_t i) { return A(s, i, k); },
                 [&](int64_t, int64_t i, int64_t j) { return cs[i * N + j]; }),
             1e-5f);
}

TEST_P(codegen_Compile, BatchedMatmulShapeErrorIsAMessage) {
  GraphMaker m;
  int a = m.input({2, 3, 4}), b = m.input({3, 4, 5});
  m.node(OpKind::Matmul, {a, b}, {2, 3, 5}, ElementType::F32);
  codegen::CompiledGraph compiled;
  std::string error;
  EXPECT_FALSE(codegen::compileGraph(m.done({a}), conformanceOptions(), &compiled, &error));
  EXPECT_NE(error.find("batch dims differ"), std::string::npos) << error;
}
