// The runtime LaunchExecutable on hand-built launch lists: memory plan
// (arena reuse, owned results, views alias), packed kernel args, views,
// reshape copies, GEMM and input checking. No MLIR involved.
#include <gtest/gtest.h>

#include <cstring>

#include "TestKernels.h"
#include "kiln/runtime/LaunchExecutable.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::runtime::test;

TEST(runtime_LaunchExecutable, ChainReusesArenaAndResultsOwnMemory) {
  const int64_t n = 1000; // 4000 bytes -> 4032 aligned
  LaunchExecutable::Builder b;
  int x = b.addInput({n}, kFloat32);
  int a = b.addKernel("add_one", addOne, {x}, {{{n}, kFloat32}})[0];
  int c = b.addKernel("times_two", timesTwo, {a}, {{{n}, kFloat32}})[0];
  int d = b.addKernel("add_one", addOne, {c}, {{{n}, kFloat32}})[0];
  int e = b.addKernel("times_two", timesTwo, {d}, {{{n}, kFloat32}})[0];
  int f = b.addKernel("add_one", addOne, {e}, {{{n}, kFloat32}})[0];
  b.setOutputs({f});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;

  const auto &plans = exe->slot_plans();
  EXPECT_EQ(plans[f].storage, SlotStorage::Owned);
  for (int s : {a, c, d, e})
    EXPECT_EQ(plans[s].storage, SlotStorage::Arena) << exe->describe();
  // a chain needs only two live intermediates at a time: a/d and c/e share;
  // a and d (dead before f is written) live in f's buffer, so the arena
  // holds only c and e.
  EXPECT_EQ(exe->arena_bytes(), 4032) << exe->describe();
  EXPECT_EQ(exe->unplanned_bytes(), 4 * 4032);
  EXPECT_EQ(plans[a].pool, f) << exe->describe();
  EXPECT_EQ(plans[d].pool, f);
  EXPECT_EQ(plans[c].pool, -1);
  EXPECT_EQ(plans[e].pool, -1); // read by the launch that writes f
  EXPECT_EQ(plans[a].offset, plans[d].offset);
  EXPECT_EQ(plans[c].offset, plans[e].offset);
  EXPECT_EQ(exe->num_launches(), 5);

  std::vector<float> xs(n);
  for (int64_t i = 0; i < n; ++i)
    xs[i] = static_cast<float>(i);
  auto out = exe->run({makeTensor({n}, xs)}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(at(out[0], {i}), ((i + 1) * 2 + 1) * 2 + 1.0f);
}

TEST(runtime_LaunchExecutable, DonatedInputsLendTheirMemoryAfterTheirLastUse) {
  // x (donatable) is last read by launch 0; c is written at launch 1 and
  // can live in x's buffer; a (dead before d is written) lives in d's.
  const int64_t n = 1000;
  LaunchExecutable::Builder b;
  int x = b.addInput({n}, kFloat32, /*donatable=*/true);
  int w = b.addInput({n}, kFloat32);
  int a = b.addKernel("add_one", addOne, {x}, {{{n}, kFloat32}})[0];
  int c = b.addKernel("times_two", timesTwo, {a}, {{{n}, kFloat32}})[0];
  int d = b.addKernel("add_two", addTwo, {c, w}, {{{n}, kFloat32}})[0];
  b.setOutputs({d});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  EXPECT_EQ(exe->slot_plans()[a].pool, d) << exe->describe();
  EXPECT_EQ(exe->slot_plans()[c].pool, -1);
  EXPECT_EQ(exe->arena_bytes(), 4032);
  EXPECT_EQ(exe->donating_slot_plans()[c].pool, x) << exe->describe();
  EXPECT_EQ(exe->donating_arena_bytes(), 0);

  std::vector<float> xs(n), ws(n, 10.0f);
  for (int64_t i = 0; i < n; ++i)
    xs[i] = static_cast<float>(i);
  // Plain run: x is not written.
  TensorView xin = makeTensor({n}, xs), win = makeTensor({n}, ws);
  auto out = exe->run({xin, win}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  EXPECT_EQ(at(out[0], {7}), (7 + 1) * 2 + 10.0f);
  EXPECT_EQ(at(xin, {7}), 7.0f);
  // Donating run while the caller still holds x: not reused.
  out = exe->run_donating({xin, win}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  EXPECT_EQ(at(out[0], {7}), (7 + 1) * 2 + 10.0f);
  EXPECT_EQ(at(xin, {7}), 7.0f);
  // Donated (the argument vector holds the only reference): same result,
  // and x's buffer now holds c = (x + 1) * 2.
  std::vector<TensorView> args{xin, win};
  xin = TensorView{};
  out = exe->run_donating(args, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  EXPECT_EQ(at(out[0], {7}), (7 + 1) * 2 + 10.0f);
  EXPECT_EQ(at(args[0], {7}), (7 + 1) * 2.0f);
  // A donated input sharing its buffer with another input is not reused
  // (the plain plan runs): w is x's memory here and is read by launch 2.
  args = {makeTensor({n}, xs), TensorView{}};
  args[1] = args[0];
  out = exe->run_donating(args, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  EXPECT_EQ(at(out[0], {7}), (7 + 1) * 2 + 7.0f);
  EXPECT_EQ(at(args[0], {7}), 7.0f);
  // So is one that is not at offset 0 of its buffer.
  args = {makeTensor({2 * n}, std::vector<float>(2 * n, 1.0f)), win};
  args[0].sizes = {n};
  args[0].offset = n;
  out = exe->run_donating(args, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  EXPECT_EQ(at(out[0], {7}), (1 + 1) * 2 + 10.0f);
  EXPECT_EQ(at(args[0], {7}), 1.0f);
}

TEST(runtime_LaunchExecutable, LiveValuesDoNotShare) {
  // a is used again by the last kernel, so it must not share with c or d.
  const int64_t n = 64;
  LaunchExecutable::Builder b;
  int x = b.addInput({n}, kFloat32);
  int a = b.addKernel("add_one", addOne, {x}, {{{n}, kFloat32}})[0];
  int c = b.addKernel("times_two", timesTwo, {a}, {{{n}, kFloat32}})[0];
  int d = b.addKernel("add_one", addOne, {c}, {{{n}, kFloat32}})[0];
  int e = b.addKernel("add_two", addTwo, {a, d}, {{{n}, kFloat32}})[0];
  b.setOutputs({e});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  const auto &plans = exe->slot_plans();
  // Same memory: the same pool (or the arena) and offset.
  auto shares = [&](int p, int q) {
    return plans[p].pool == plans[q].pool && plans[p].offset == plans[q].offset;
  };
  EXPECT_FALSE(shares(a, c)) << exe->describe();
  EXPECT_FALSE(shares(a, d));
  EXPECT_FALSE(shares(c, d)); // same launch
  EXPECT_EQ(plans[c].pool, e); // dead before e is written
  auto out = exe->run({makeTensor({n}, std::vector<float>(n, 1.0f))}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  EXPECT_EQ(at(out[0], {5}), 2.0f + 5.0f); // a = 2, d = 5
}

TEST(runtime_LaunchExecutable, ViewsAliasAndKeepBasesAlive) {
  LaunchExecutable::Builder b;
  int w = b.addInput({4, 8}, kFloat32);
  int wt = b.addTranspose(w, {1, 0}); // view of an input
  int flat = b.addReshape(w, {32});   // inputs are row-major in the executable: a static view
  int y = b.addKernel("add_one", addOne, {flat}, {{{32}, kFloat32}})[0];
  int y2 = b.addReshape(y, {8, 4});    // statically a view
  int yt = b.addTranspose(y2, {1, 0}); // result view -> y escapes
  int z = b.addKernel("add_one", addOne, {flat}, {{{32}, kFloat32}})[0];
  int zb = b.addBroadcast(z, {3, 32});                     // arena base, view used later
  int zr = b.addReshape(b.addTranspose(zb, {1, 0}), {96}); // must copy
  b.setOutputs({wt, yt, zr});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  const auto &plans = exe->slot_plans();
  EXPECT_EQ(plans[wt].storage, SlotStorage::View);
  EXPECT_EQ(plans[y].storage, SlotStorage::Owned) << exe->describe();
  EXPECT_EQ(plans[y2].storage, SlotStorage::View);
  EXPECT_EQ(plans[yt].storage, SlotStorage::View);
  EXPECT_EQ(plans[z].storage, SlotStorage::Arena);
  EXPECT_EQ(plans[zr].storage, SlotStorage::Owned);
  EXPECT_GE(plans[z].last_use, plans[zr].def); // the view keeps z alive
  EXPECT_EQ(plans[flat].storage, SlotStorage::View);
  EXPECT_EQ(exe->num_launches(), 3);           // y, z, zr

  std::vector<float> ws(32);
  for (int i = 0; i < 32; ++i)
    ws[i] = static_cast<float>(i);
  TensorView win = makeTensor({4, 8}, ws);
  auto out = exe->run({win}, &error);
  ASSERT_EQ(out.size(), 3u) << error;
  EXPECT_EQ(out[0].buffer, win.buffer); // the transposed input aliases it
  EXPECT_EQ(out[0].strides, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(at(out[0], {3, 2}), 19.0f);
  EXPECT_EQ(out[1].sizes, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(at(out[1], {1, 2}), 2 * 4 + 1 + 1.0f); // y2[2][1] = y[9]
  // zr[i] = zb^T flattened: zb^T is [32, 3] with zb^T[j][k] = z[j].
  for (int i = 0; i < 96; ++i)
    EXPECT_EQ(at(out[2], {i}), i / 3 + 1.0f);
}

TEST(runtime_LaunchExecutable, StridedInputsAndReshapeCopy) {
  // The input is a transposed view: run() copies it row-major first (inputs
  // are row-major inside the executable), so the reshape is a static view.
  LaunchExecutable::Builder b;
  int x = b.addInput({3, 2}, kFloat32);
  int r = b.addReshape(x, {6});
  int y = b.addKernel("add_one", addOne, {r}, {{{6}, kFloat32}})[0];
  b.setOutputs({y});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  EXPECT_EQ(exe->slot_plans()[r].storage, SlotStorage::View);

  TensorView base = makeTensor({2, 3}, {0, 1, 2, 3, 4, 5});
  TensorView xt = base;
  xt.sizes = {3, 2};
  xt.strides = {1, 3}; // x[i][j] = base[j][i]
  auto out = exe->run({xt}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  const float expect[6] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(at(out[0], {i}), expect[i] + 1.0f);
  // The contiguous input gives a view, same answer for its own layout.
  out = exe->run({makeTensor({3, 2}, {0, 3, 1, 4, 2, 5})}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(at(out[0], {i}), expect[i] + 1.0f);
}

TEST(runtime_LaunchExecutable, KernelStrideExpectationsAreChecked) {
  LaunchExecutable::Builder b;
  int x = b.addInput({4, 8}, kFloat32);
  int xt = b.addTranspose(x, {1, 0});
  EXPECT_EQ(b.strides(xt), (std::vector<int64_t>{1, 8}));
  b.addKernel("add_one", addOne, {xt}, {{{8, 4}, kFloat32}}, {{4, 1}}); // compiled for row-major: wrong
  std::string error;
  EXPECT_FALSE(b.finish(&error));
  EXPECT_NE(error.find("operand 0 has strides [1, 8] but the kernel was compiled for [4, 1]"), std::string::npos)
      << error;
}

TEST(runtime_LaunchExecutable, GemmWithTransposedOperand) {
  LaunchExecutable::Builder b;
  int x = b.addInput({2, 3}, kFloat32);
  int w = b.addInput({4, 3}, kFloat32);
  int y = b.addGemm(x, b.addTranspose(w, {1, 0}));
  b.setOutputs({y});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  std::vector<float> xs = {1, 2, 3, 4, 5, 6}, ws(12);
  for (int i = 0; i < 12; ++i)
    ws[i] = static_cast<float>(i) - 5.0f;
  auto out = exe->run({makeTensor({2, 3}, xs), makeTensor({4, 3}, ws)}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      float ref = 0;
      for (int k = 0; k < 3; ++k)
        ref += xs[i * 3 + k] * ws[j * 3 + k];
      EXPECT_FLOAT_EQ(at(out[0], {i, j}), ref);
    }
}

TEST(runtime_LaunchExecutable, RejectsMismatchedInputs) {
  LaunchExecutable::Builder b;
  int x = b.addInput({4, 8}, kFloat32);
  b.setOutputs({b.addTranspose(x, {1, 0})});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  EXPECT_TRUE(exe->run({makeTensor({8, 4}, std::vector<float>(32))}, &error).empty());
  EXPECT_NE(error.find("expected float32 [4, 8], got float32 [8, 4]"), std::string::npos) << error;
  EXPECT_TRUE(exe->run({}, &error).empty());
  EXPECT_NE(error.find("expected 1 inputs"), std::string::npos) << error;
  TensorView small = makeTensor({4, 8}, std::vector<float>(32));
  small.offset = 1; // runs past the end of the buffer
  EXPECT_TRUE(exe->run({small}, &error).empty());
  EXPECT_NE(error.find("reaches element"), std::string::npos) << error;
}

TEST(runtime_LaunchExecutable, BuilderReportsBadShapes) {
  LaunchExecutable::Builder b;
  int x = b.addInput({4, 8}, kFloat32);
  EXPECT_EQ(b.addGemm(x, x), -1);
  std::string error;
  EXPECT_FALSE(b.finish(&error));
  EXPECT_NE(error.find("gemm"), std::string::npos) << error;
}

TEST(runtime_LaunchExecutable, BatchedGemmWithStridedAndBroadcastOperands) {
  // y[b] = x[b] x transpose(w[b]); z[b] = x[b] x m (m broadcast: batch stride 0).
  LaunchExecutable::Builder b;
  int x = b.addInput({2, 2, 3}, kFloat32);
  int w = b.addInput({2, 4, 3}, kFloat32);
  int m = b.addInput({3, 4}, kFloat32);
  int y = b.addGemm(x, b.addTranspose(w, {0, 2, 1}));
  int z = b.addGemm(x, b.addBroadcast(m, {2, 3, 4}));
  ASSERT_GE(y, 0) << b.error();
  EXPECT_EQ(b.type(y).sizes, (std::vector<int64_t>{2, 2, 4}));
  b.setOutputs({y, z});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  std::vector<float> xs(12), ws(24), ms(12);
  for (int i = 0; i < 12; ++i)
    xs[i] = static_cast<float>(i % 5) - 2.0f, ms[i] = static_cast<float>(i) * 0.5f - 3.0f;
  for (int i = 0; i < 24; ++i)
    ws[i] = static_cast<float>(i) - 11.0f;
  auto out = exe->run({makeTensor({2, 2, 3}, xs), makeTensor({2, 4, 3}, ws), makeTensor({3, 4}, ms)}, &error);
  ASSERT_EQ(out.size(), 2u) << error;
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) {
        float ry = 0, rz = 0;
        for (int k = 0; k < 3; ++k) {
          ry += xs[(s * 2 + i) * 3 + k] * ws[(s * 4 + j) * 3 + k];
          rz += xs[(s * 2 + i) * 3 + k] * ms[k * 4 + j];
        }
        EXPECT_FLOAT_EQ(at(out[0], {s, i, j}), ry);
        EXPECT_FLOAT_EQ(at(out[1], {s, i, j}), rz);
      }
}

TEST(runtime_LaunchExecutable, BatchedGemmRejectsMismatchedBatch) {
  LaunchExecutable::Builder b;
  int x = b.addInput({2, 2, 3}, kFloat32);
  int w = b.addInput({3, 3, 4}, kFloat32);
  EXPECT_EQ(b.addGemm(x, w), -1);
  EXPECT_NE(b.error().find("[B, M, K] x [B, K, N]"), std::string::npos) << b.error();
}

TEST(runtime_LaunchExecutable, InPlaceResultTakesADyingOperandsPlacement) {
  // a = x + 1; c = a * 2 (in place over a: a dies here); d = c + 1 (in
  // place over c); e = a2 + d where a2 is read again later (not in place).
  const int64_t n = 1000;
  LaunchExecutable::Builder b;
  int x = b.addInput({n}, kFloat32);
  int a = b.addKernel("add_one", addOne, {x}, {{{n}, kFloat32}})[0];
  int c = b.addKernel("times_two", timesTwo, {a}, {{{n}, kFloat32}}, {}, false, {{0, 0}})[0];
  int d = b.addKernel("add_one", addOne, {c}, {{{n}, kFloat32}}, {}, false, {{0, 0}})[0];
  int a2 = b.addKernel("add_one", addOne, {d}, {{{n}, kFloat32}})[0];
  int e = b.addKernel("add_two", addTwo, {a2, d}, {{{n}, kFloat32}}, {}, false, {{0, 0}})[0];
  int f = b.addKernel("add_two", addTwo, {e, a2}, {{{n}, kFloat32}})[0];
  b.setOutputs({f});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  const auto &plans = exe->slot_plans();
  // c over a, d over c: one placement for the chain a -> c -> d.
  EXPECT_EQ(plans[c].offset, plans[a].offset) << exe->describe();
  EXPECT_EQ(plans[c].pool, plans[a].pool);
  EXPECT_EQ(plans[d].offset, plans[a].offset) << exe->describe();
  // e may not take a2's memory: a2 is read again by f.
  EXPECT_EQ(exe->num_in_place(), 2) << exe->describe();

  std::vector<float> xs(n);
  for (int64_t i = 0; i < n; ++i)
    xs[i] = static_cast<float>(i);
  auto out = exe->run({makeTensor({n}, xs)}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  for (int64_t i = 0; i < n; ++i) {
    const float dv = (xs[i] + 1.0f) * 2.0f + 1.0f, a2v = dv + 1.0f;
    ASSERT_EQ(at(out[0], {i}), (a2v + dv) + a2v) << i;
  }
}

TEST(runtime_LaunchExecutable, InPlaceOverADonatedInputOnlyInTheDonatingPlan) {
  // y = x * 2 with x donatable and read last there: the donating plan
  // writes y into x's buffer; the plain plan cannot (x is the caller's).
  const int64_t n = 256;
  LaunchExecutable::Builder b;
  int x = b.addInput({n}, kFloat32, /*donatable=*/true);
  int y = b.addKernel("times_two", timesTwo, {x}, {{{n}, kFloat32}}, {}, false, {{0, 0}})[0];
  int z = b.addKernel("add_one", addOne, {y}, {{{n}, kFloat32}})[0];
  b.setOutputs({z});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  EXPECT_EQ(exe->num_in_place(), 0) << exe->describe();
  EXPECT_EQ(exe->num_in_place_donating(), 1) << exe->describe();
  EXPECT_EQ(exe->donating_slot_plans()[y].pool, x) << exe->describe();
  EXPECT_EQ(exe->donating_slot_plans()[y].offset, 0);
  EXPECT_EQ(exe->donating_arena_bytes(), 0);

  std::vector<float> xs(n);
  for (int64_t i = 0; i < n; ++i)
    xs[i] = static_cast<float>(i) - 7.0f;
  auto out = exe->run({makeTensor({n}, xs)}, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(at(out[0], {i}), xs[i] * 2.0f + 1.0f) << i;
  // Donated (the argument vector holds the only reference): x's buffer now
  // holds y = x * 2.
  std::vector<TensorView> args{makeTensor({n}, xs)};
  out = exe->run_donating(args, &error);
  ASSERT_EQ(out.size(), 1u) << error;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(at(out[0], {i}), xs[i] * 2.0f + 1.0f) << i;
    ASSERT_EQ(at(args[0], {i}), xs[i] * 2.0f) << i;
  }
}

TEST(runtime_LaunchExecutable, InPlacePairOutOfRangeIsAnError) {
  LaunchExecutable::Builder b;
  int x = b.addInput({4}, kFloat32);
  EXPECT_TRUE(b.addKernel("add_one", addOne, {x}, {{{4}, kFloat32}}, {}, false, {{1, 0}}).empty());
  std::string error;
  EXPECT_FALSE(b.finish(&error));
  EXPECT_NE(error.find("in-place pair (operand 1, result 0) is out of range"), std::string::npos) << error;
}
