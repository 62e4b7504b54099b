// Indexing/joining ops, embedding, dropout, mse_loss and BCE with logits:
// finite-difference gradients, closed-form values, view semantics, dropout's
// replayable mask, and bad inputs.
#include <cmath>

#include "gradcheck.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using testing::expect_gradients_match;
using testing::values;
using TL = std::vector<Tensor>;
using V = std::vector<double>;

Tensor idx(const std::vector<int64_t> &v, const Shape &s) { return tensor(v, s); }

/// EXPECTs that fn throws kiln::Error whose message contains every part.
void expect_error(const std::function<void()> &fn, const std::vector<std::string> &parts) {
  try {
    fn();
    ADD_FAILURE() << "expected kiln::Error containing '" << parts[0] << "'";
  } catch (const Error &e) {
    for (const std::string &p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

class IndexingGrad : public ::testing::Test {
protected:
  void SetUp() override { manual_seed(11); }
};

// ---- finite-difference gradients ------------------------------------------------
TEST_F(IndexingGrad, IndexSelectRepeats) {
  Tensor i = idx({2, 0, 2, 1}, {4});
  expect_gradients_match([i](const TL &x) { return index_select(x[0], 1, i); }, {randn({3, 3, 2})});
}
TEST_F(IndexingGrad, GatherDim0AndSmallerIndex) {
  Tensor i = idx({3, 0, 1, 1}, {2, 2});
  expect_gradients_match([i](const TL &x) { return gather(x[0], 0, i); }, {randn({4, 3})});
}
TEST_F(IndexingGrad, GatherOfTransposedInput) {
  Tensor i = idx({1, 1, 0, 2, 0, 0}, {3, 2});
  expect_gradients_match([i](const TL &x) { return gather(x[0].t(), 1, i); }, {randn({3, 3})});
}
TEST_F(IndexingGrad, ScatterAddBothInputs) {
  Tensor i = idx({0, 2, 2, 0, 1, 2}, {2, 3});
  expect_gradients_match([i](const TL &x) { return scatter_add(x[0], 0, i, x[1]); }, {randn({3, 3}), randn({2, 3})});
}
TEST_F(IndexingGrad, ScatterAddSrcLargerThanIndex) {
  // Elements of src outside the index's extent get a zero gradient.
  Tensor i = idx({1, 0, 4, 4}, {2, 2});
  expect_gradients_match([i](const TL &x) { return scatter_add(x[0], 1, i, x[1]); }, {randn({3, 5}), randn({3, 4})});
}
TEST_F(IndexingGrad, SliceWithStep) {
  expect_gradients_match([](const TL &x) { return slice(x[0], 1, 1, 7, 3); }, {randn({2, 8})});
  expect_gradients_match([](const TL &x) { return slice(x[0], 0, -4, 100, 2); }, {randn({5, 2})});
  expect_gradients_match([](const TL &x) { return slice(x[0], 0, 3, 1, 2); }, {randn({5, 2})});
}
TEST_F(IndexingGrad, CatAndStack) {
  expect_gradients_match([](const TL &x) { return cat({x[0], x[1], x[0]}, 1); }, {randn({2, 1, 3}), randn({2, 2, 3})});
  expect_gradients_match([](const TL &x) { return stack({x[0], x[1]}, 1); }, {randn({2, 3}), randn({2, 3})});
}
TEST_F(IndexingGrad, SplitAndChunk) {
  expect_gradients_match([](const TL &x) {
    auto p = split(x[0], 2, 0);
    return cat({p[2] * 3.0, p[0], p[1] * 2.0}, 0);
  }, {randn({5, 2})});
  expect_gradients_match([](const TL &x) {
    auto p = chunk(x[0], 2, 1);
    return p[0] * p[1];
  }, {randn({3, 4})});
}
TEST_F(IndexingGrad, SelectAndUnbind) {
  expect_gradients_match([](const TL &x) { return select(x[0], 1, -1) * select(x[0], 1, 0); }, {randn({3, 4})});
  expect_gradients_match([](const TL &x) {
    auto r = unbind(x[0], 0);
    return r[0] + r[2] * 3.0;
  }, {randn({3, 2})});
}
TEST_F(IndexingGrad, Embedding) {
  Tensor i = idx({1, 1, 3, 0}, {2, 2});
  expect_gradients_match([i](const TL &x) { return F::embedding(i, x[0]); }, {randn({4, 3})});
}
TEST_F(IndexingGrad, DropoutReplaysItsMask) {
  // Each call draws at the same (seed, offset): the function is deterministic.
  expect_gradients_match([](const TL &x) {
    default_generator().manual_seed(5);
    return F::dropout(x[0], 0.4);
  }, {randn({3, 5})});
}
TEST_F(IndexingGrad, MseLoss) {
  expect_gradients_match([](const TL &x) { return F::mse_loss(x[0], x[1], F::Reduction::None); },
                         {randn({2, 3}), randn({2, 3})});
  expect_gradients_match([](const TL &x) { return F::mse_loss(x[0], x[1]); }, {randn({2, 3}), randn({2, 3})});
}
TEST_F(IndexingGrad, BceWithLogitsAndPosWeight) {
  Tensor x = tensor({-30.f, -2.f, -0.3f, 0.4f, 3.f, 25.f}, {2, 3});
  expect_gradients_match([](const TL &v) { return F::binary_cross_entropy_with_logits(v[0], v[1], F::Reduction::Sum); },
                         {x, rand({2, 3})});
  expect_gradients_match([](const TL &v) {
    return F::binary_cross_entropy_with_logits(v[0], v[1], F::Reduction::None, v[2]);
  }, {x, rand({2, 3}), uniform({3}, 0.5, 3.0)});
}

// ---- closed-form values and view semantics ----------------------------------------
TEST(IndexingValues, GatherScatterIndexSelect) {
  Tensor a = tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  EXPECT_EQ(values(gather(a, 1, idx({2, 0, 1, 1}, {2, 2}))), (V{3, 1, 5, 5}));
  EXPECT_EQ(values(index_select(a, 1, idx({2, 2, 0}, {3}))), (V{3, 3, 1, 6, 6, 4}));
  EXPECT_EQ(values(index_select(a, 0, idx({1}, {}))), (V{4, 5, 6}));
  EXPECT_EQ(values(scatter_add(zeros({3}), 0, idx({0, 2, 0}, {3}), tensor({1.f, 2.f, 3.f}, {3}))), (V{4, 0, 2}));
}
TEST(IndexingValues, SliceIsAStridedView) {
  Tensor a = arange(10, kFloat32).reshape({2, 5});
  Tensor s = slice(a, 1, 1, 5, 2);
  EXPECT_EQ(s.sizes(), (Shape{2, 2}));
  EXPECT_EQ(s.strides(), (Shape{5, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(values(s), (V{1, 3, 6, 8}));
  EXPECT_EQ(slice(a, 1, 0, 5, 3).size(1), 2);  // ceil(5 / 3)
  EXPECT_EQ(slice(a, 1, 4, 2, 2).size(1), 0);  // end before start: empty
  EXPECT_EQ(slice(a, 1, 3, 100, 1).size(1), 2);
}
TEST(IndexingValues, SplitChunkAreViews) {
  Tensor a = arange(7, kFloat32);
  auto s = split(a, 3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[2].sizes(), (Shape{1}));
  EXPECT_EQ(s[1].impl()->storage, a.impl()->storage);
  auto c = chunk(arange(6, kFloat32), 4);  // ceil(6/4) = 2 -> three chunks, as torch.chunk
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(values(c[2]), (V{4, 5}));
  EXPECT_EQ(chunk(zeros({0, 2}), 3).size(), 3u);
  EXPECT_EQ(split(zeros({0}), 2).size(), 1u);
}
TEST(IndexingValues, SelectAndUnbindAreViews) {
  Tensor a = arange(24, kFloat32).reshape({2, 3, 4});  // a[i][j][k] = 12i + 4j + k
  Tensor last = select(a, 1, -1);                     // a[:, 2, :]
  EXPECT_EQ(last.sizes(), (Shape{2, 4}));
  EXPECT_EQ(values(last), (V{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(last.impl()->storage, a.impl()->storage);
  EXPECT_EQ(values(select(a, 2, 1)), (V{1, 5, 9, 13, 17, 21}));
  auto rows = unbind(a, 0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].sizes(), (Shape{3, 4}));
  EXPECT_EQ(values(rows[1]).front(), 12);
  EXPECT_EQ(select(arange(3, kFloat32), 0, 1).dim(), 0);
}
TEST(IndexingValues, CatStackLayouts) {
  Tensor a = tensor({1.f, 2.f, 3.f, 4.f}, {2, 2});
  EXPECT_EQ(values(cat({a.t(), zeros({0}), a}, 1)), (V{1, 3, 1, 2, 2, 4, 3, 4}));
  Tensor st = stack({a, a * 2.0}, 2);
  EXPECT_EQ(st.sizes(), (Shape{2, 2, 2}));
  EXPECT_EQ(values(st), (V{1, 2, 2, 4, 3, 6, 4, 8}));
  EXPECT_EQ(cat({a.to(kFloat16), a.to(kBFloat16)}, 0).dtype(), kFloat32);
}
TEST(IndexingValues, EmbeddingShape) {
  Tensor w = arange(6, kFloat32).reshape({3, 2});
  Tensor e = F::embedding(idx({2, 0, 1, 2}, {2, 1, 2}), w);
  EXPECT_EQ(e.sizes(), (Shape{2, 1, 2, 2}));
  EXPECT_EQ(values(e), (V{4, 5, 0, 1, 2, 3, 4, 5}));
}
TEST(IndexingValues, LossesClosedForm) {
  Tensor x = tensor({1.f, 2.f}, {2}), t = tensor({0.f, 4.f}, {2});
  EXPECT_DOUBLE_EQ(F::mse_loss(x, t).item(), 2.5);
  EXPECT_DOUBLE_EQ(F::mse_loss(x, t, F::Reduction::Sum).item(), 5.0);
  // BCE(x=0, t) = log 2 for any t; pos_weight 3 with t = 1 triples it.
  Tensor z = zeros({2});
  EXPECT_NEAR(F::binary_cross_entropy_with_logits(z, tensor({0.f, 1.f}, {2})).item(), std::log(2.0), 1e-6);
  EXPECT_NEAR(F::binary_cross_entropy_with_logits(z, ones({2}), F::Reduction::Mean, full({1}, 3.0)).item(),
              3 * std::log(2.0), 1e-6);
  // Stable for large logits: BCE(100, 0) = 100, BCE(-100, 1) = 100.
  EXPECT_NEAR(values(F::binary_cross_entropy_with_logits(tensor({100.f, -100.f}, {2}), tensor({0.f, 1.f}, {2}),
                                                         F::Reduction::None))[1], 100.0, 1e-4);
}

// ---- dropout --------------------------------------------------------------------
TEST(Dropout, SameSeedAndOffsetRedrawIdenticalMask) {
  Tensor x = ones({1000});
  default_generator().manual_seed(42);
  default_generator().set_offset(17);
  V first = values(F::dropout(x, 0.3));
  EXPECT_EQ(default_generator().offset(), 17u + 250u);  // one Philox block per 4 elements
  V second = values(F::dropout(x, 0.3));
  EXPECT_NE(first, second);  // the offset advanced
  default_generator().manual_seed(42);
  default_generator().set_offset(17);
  EXPECT_EQ(values(F::dropout(x, 0.3)), first);
}
TEST(Dropout, KeptFractionAndScale) {
  manual_seed(3);
  const double p = 0.3;
  Tensor x = full({20000}, 2.0);
  V y = values(F::dropout(x, p));
  int64_t kept = 0;
  for (double v : y) {
    if (v != 0.0) {
      ++kept;
      EXPECT_NEAR(v, 2.0 / (1.0 - p), 1e-6);
    }
  }
  // Binomial(20000, 0.7): standard deviation ~65 elements (0.003).
  EXPECT_NEAR(static_cast<double>(kept) / 20000.0, 1.0 - p, 0.015);
}
TEST(Dropout, MaskMatchesDocumentedPhiloxMapping) {
  manual_seed(9);
  Tensor y = F::dropout(ones({6}, kFloat64), 0.5);
  V v = values(y);
  for (int64_t i = 0; i < 6; ++i) {
    auto words = Generator::philox({static_cast<uint32_t>(i / 4), 0, 0, 0}, {9, 0});
    double u = static_cast<double>(words[i % 4] >> 8) / 16777216.0;
    EXPECT_EQ(v[i], u < 0.5 ? 2.0 : 0.0) << i;
  }
}
TEST(Dropout, CheckpointRecomputationReplaysTheMask) {
  auto fn = [](const TL &in) { return F::dropout(in[0], 0.5) * 3.0; };
  manual_seed(21);
  Tensor x = ones({64}).requires_grad_(true);
  Tensor y = autograd::checkpoint(fn, {x});
  y.sum().backward();
  // d(sum(3 * dropout(x)))/dx = 3 * mask: nonzero exactly where y is.
  V out = values(y), grad = values(x.grad());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(grad[i], out[i]) << i;
}
TEST(Dropout, IdentityAndEdgeCases) {
  Tensor x = randn({4});
  const uint64_t before = default_generator().offset();
  EXPECT_EQ(F::dropout(x, 0.5, /*training=*/false).impl(), x.impl());
  EXPECT_EQ(F::dropout(x, 0.0).impl(), x.impl());
  EXPECT_EQ(default_generator().offset(), before);
  EXPECT_EQ(values(F::dropout(x, 1.0)), (V{0, 0, 0, 0}));
  EXPECT_EQ(F::dropout(x.to(kFloat16), 0.5).dtype(), kFloat16);
}

// ---- bad inputs -------------------------------------------------------------------
TEST(IndexingBadInput, IndexSelect) {
  Tensor a = zeros({2, 3});
  expect_error([&] { index_select(a, 1, idx({0, 3}, {2})); }, {"index_select", "index 3", "size 3"});
  expect_error([&] { index_select(a, 2, idx({0}, {1})); }, {"index_select", "dimension 2"});
  expect_error([&] { index_select(a, 0, zeros({1})); }, {"index_select", "float32"});
  expect_error([&] { index_select(a, 0, idx({0, 1}, {1, 2})); }, {"index_select", "[1, 2]"});
}
TEST(IndexingBadInput, Gather) {
  Tensor a = zeros({2, 3});
  expect_error([&] { gather(a, 1, idx({0, -1}, {1, 2})); }, {"gather", "index -1", "size 3"});
  expect_error([&] { gather(a, 1, idx({0, 1}, {2})); }, {"gather", "[2]", "same rank"});
  expect_error([&] { gather(a, 1, idx({0, 0, 0}, {3, 1})); }, {"gather", "[3, 1]", "dimension 0"});
  expect_error([&] { gather(a, 0, zeros({1, 1}, kInt32)); }, {"gather", "int32"});
}
TEST(IndexingBadInput, ScatterAdd) {
  Tensor a = zeros({3});
  expect_error([&] { scatter_add(a, 0, idx({5}, {1}), ones({1})); }, {"scatter_add", "index 5", "size 3"});
  expect_error([&] { scatter_add(a, 0, idx({0}, {1}), ones({1}, kFloat64)); }, {"scatter_add", "float64"});
  expect_error([&] { scatter_add(a, 0, idx({0, 1}, {2}), ones({1})); }, {"scatter_add", "src [1]"});
}
TEST(IndexingBadInput, Slice) {
  expect_error([&] { slice(zeros({4}), 0, 0, 4, 0); }, {"slice", "step", "0"});
  expect_error([&] { slice(zeros({4}), 1, 0, 4, 2); }, {"slice", "dimension 1"});
  expect_error([&] { slice(zeros({}), 0, 0, 1, 2); }, {"slice", "0-dim"});
}
TEST(IndexingBadInput, CatStack) {
  expect_error([&] { cat({}, 0); }, {"cat", "non-empty"});
  expect_error([&] { cat({zeros({2, 3}), zeros({3, 2})}, 0); }, {"cat", "dimension 1", "[3, 2]"});
  expect_error([&] { cat({zeros({2, 3}), zeros({2})}, 0); }, {"cat", "rank 1"});
  expect_error([&] { cat({zeros({2}), zeros({2})}, 1); }, {"cat", "dimension 1"});
  expect_error([&] { stack({zeros({2}), zeros({3})}, 0); }, {"stack", "[3]", "entry 1"});
  expect_error([&] { stack({zeros({2})}, 2); }, {"stack", "dimension 2"});
}
TEST(IndexingBadInput, SplitChunk) {
  expect_error([&] { split(zeros({4}), 0); }, {"split", "split_size", "0"});
  expect_error([&] { split(zeros({4}), 2, 1); }, {"split", "dimension 1"});
  expect_error([&] { chunk(zeros({4}), 0); }, {"chunk", "chunks", "0"});
  expect_error([&] { chunk(zeros({}), 2); }, {"chunk", "[]"});
}
TEST(IndexingBadInput, SelectUnbind) {
  expect_error([&] { select(zeros({2, 3}), 1, 3); }, {"select", "index 3", "dimension 1", "size 3"});
  expect_error([&] { select(zeros({2, 3}), 0, -3); }, {"select", "-3"});
  expect_error([&] { select(zeros({}), 0, 0); }, {"select", "0-dim"});
  expect_error([&] { unbind(zeros({}), 0); }, {"unbind", "0-dim"});
}
TEST(IndexingBadInput, Embedding) {
  Tensor w = zeros({3, 2});
  expect_error([&] { F::embedding(idx({0, 3}, {2}), w); }, {"embedding", "index 3", "3 embeddings"});
  expect_error([&] { F::embedding(zeros({2}), w); }, {"embedding", "float32"});
  expect_error([&] { F::embedding(idx({0}, {1}), zeros({3})); }, {"embedding", "[3]"});
}
TEST(IndexingBadInput, Dropout) {
  expect_error([&] { F::dropout(zeros({2}), 1.5); }, {"dropout", "1.5"});
  expect_error([&] { F::dropout(zeros({2}), -0.1); }, {"dropout", "-0.1"});
  expect_error([&] { F::dropout(zeros({2}, kInt64), 0.5); }, {"dropout", "int64"});
}
TEST(IndexingBadInput, MseLoss) {
  expect_error([&] { F::mse_loss(zeros({2, 3}), zeros({3})); }, {"mse_loss", "[3]", "[2, 3]"});
  expect_error([&] { F::mse_loss(zeros({2}, kInt64), zeros({2})); }, {"mse_loss", "int64"});
}
TEST(IndexingBadInput, BceWithLogits) {
  expect_error([&] { F::binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 2})); },
               {"binary_cross_entropy_with_logits", "[2, 2]"});
  expect_error([&] {
    F::binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 3}), F::Reduction::Mean, ones({4}));
  }, {"binary_cross_entropy_with_logits", "[4]"});
  expect_error([&] {
    F::binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 3}), F::Reduction::Mean, ones({2, 2, 3}));
  }, {"binary_cross_entropy_with_logits", "pos_weight [2, 2, 3]"});
}

}  // namespace
}  // namespace kiln
