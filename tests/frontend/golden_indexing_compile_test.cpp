// The golden gather / index_select / scatter_add / embedding cases of
// golden_indexing_test.cpp (tests/golden/indexing/gen_indexing.py, PyTorch
// values) through kiln::compile(fn), so the dialect's kiln.gather and
// kiln.scatter_add (and scatter_add as gather's backward) are checked against
// an independent source, not only against eager: outputs and every input
// gradient against PyTorch in each dtype, no graph break; then the compiled
// gradients against central finite differences (repeated indices included,
// where the scatter-add must accumulate).
#include <functional>

#include "../golden/golden.h"
#include "gradcheck.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using golden::Case;
using golden::TensorMap;
using Outs = std::vector<Tensor>;

const std::map<std::string, Case> &cases() {
  static auto c = golden::load("indexing/indexing.json");
  return c;
}

/// The case `name`, or a test failure naming it.
const Case *find_case(const std::string &name) {
  auto it = cases().find(name);
  if (it == cases().end()) {
    ADD_FAILURE() << "golden case missing: " << name;
    return nullptr;
  }
  return &it->second;
}

/// Runs case `name` with `call` (which calls a compiled function on the
/// case's tensors) and checks that the compiled graph has no break.
template <class Compiled>
void check_compiled(const std::string &name, Compiled &compiled, const std::function<Tensor(TensorMap &)> &call) {
  SCOPED_TRACE(name);
  const Case *c = find_case(name);
  if (!c) return;
  golden::check_op(*c, name, [&](TensorMap &in) { return Outs{call(in)}; });
  EXPECT_TRUE(compiled.graph_breaks().empty()) << compiled.graph_breaks().front();
  EXPECT_EQ(compiled.stats().eager_fallbacks, 0);
}

class GoldenIndexingCompiled : public ::testing::TestWithParam<std::string> {
protected:
  std::string name(const std::string &op) const { return op + "_" + GetParam(); }
};

TEST_P(GoldenIndexingCompiled, IndexSelect) {
  auto dim0 = compile([](const Tensor &a, const Tensor &i) { return index_select(a, 0, i); });
  check_compiled(name("index_select_dim0"), dim0, [&](TensorMap &in) { return dim0(in["a"], in["index"]); });
  auto dim1 = compile([](const Tensor &a, const Tensor &i) { return index_select(a, -2, i); });
  check_compiled(name("index_select_dim1"), dim1, [&](TensorMap &in) { return dim1(in["a"], in["index"]); });
}

TEST_P(GoldenIndexingCompiled, Gather) {
  auto dim1 = compile([](const Tensor &a, const Tensor &i) { return gather(a, 1, i); });
  check_compiled(name("gather_dim1"), dim1, [&](TensorMap &in) { return dim1(in["a"], in["index"]); });
  auto dim0 = compile([](const Tensor &a, const Tensor &i) { return gather(a, 0, i); });
  check_compiled(name("gather_dim0_smaller"), dim0, [&](TensorMap &in) { return dim0(in["a"], in["index"]); });
}

TEST_P(GoldenIndexingCompiled, ScatterAdd) {
  auto dim0 = compile([](const Tensor &a, const Tensor &i, const Tensor &s) { return scatter_add(a, 0, i, s); });
  check_compiled(name("scatter_add_dim0"), dim0,
                 [&](TensorMap &in) { return dim0(in["a"], in["index"], in["src"]); });
  auto dim1 = compile([](const Tensor &a, const Tensor &i, const Tensor &s) { return scatter_add(a, 1, i, s); });
  check_compiled(name("scatter_add_dim1"), dim1,
                 [&](TensorMap &in) { return dim1(in["a"], in["index"], in["src"]); });
}

TEST_P(GoldenIndexingCompiled, Embedding) {
  auto emb = compile([](const Tensor &ids, const Tensor &w) { return F::embedding(ids, w); });
  check_compiled(name("embedding"), emb, [&](TensorMap &in) { return emb(in["input"], in["weight"]); });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GoldenIndexingCompiled, ::testing::Values("f32", "f64", "f16", "bf16"));

TEST(GoldenIndexingCompiledMisc, IntegerGatherAndScatterAdd) {
  auto g = compile([](const Tensor &a, const Tensor &i) { return gather(a, 0, i); });
  check_compiled("gather_int64", g, [&](TensorMap &in) { return g(in["a"], in["index"]); });
  auto s = compile([](const Tensor &a, const Tensor &i, const Tensor &src) { return scatter_add(a, 0, i, src); });
  check_compiled("scatter_add_int64", s, [&](TensorMap &in) { return s(in["a"], in["index"], in["src"]); });
}

// ---- compiled gradients against finite differences (float64) ---------------

Tensor ids(std::vector<int64_t> v, std::vector<int64_t> shape) { return tensor(std::move(v), std::move(shape)); }

TEST(IndexingCompiledGradcheck, GatherWithRepeatedIndices) {
  Tensor index = ids({0, 0, 3, 1, 2, 2, 3, 3}, {4, 2});  // every row gathers one column twice or more
  auto f = compile([&](const Tensor &a) { return tanh(gather(a, 1, index)) * 3.0; });
  manual_seed(7);
  testing::expect_gradients_match([&](const std::vector<Tensor> &x) { return f(x[0]); }, {randn({4, 5})});
}

TEST(IndexingCompiledGradcheck, IndexSelectWithRepeatedRows) {
  Tensor index = ids({2, 0, 2, 2, 1}, {5});
  auto f = compile([&](const Tensor &a) { return exp(index_select(a, 0, index) * 0.5); });
  manual_seed(8);
  testing::expect_gradients_match([&](const std::vector<Tensor> &x) { return f(x[0]); }, {randn({3, 4})});
}

TEST(IndexingCompiledGradcheck, ScatterAddBothInputs) {
  Tensor index = ids({1, 1, 3, 0, 1, 3, 3, 0, 2}, {3, 3});  // repeated destinations accumulate
  auto f = compile([&](const Tensor &a, const Tensor &s) { return sin(scatter_add(a, 0, index, s * s)); });
  manual_seed(9);
  testing::expect_gradients_match([&](const std::vector<Tensor> &x) { return f(x[0], x[1]); },
                                  {randn({4, 3}), randn({3, 3})});
}

TEST(IndexingCompiledGradcheck, EmbeddingWeight) {
  Tensor tokens = ids({4, 1, 4, 0, 4, 2}, {2, 3});
  auto f = compile([&](const Tensor &w) { return F::embedding(tokens, w) * F::embedding(tokens, w); });
  manual_seed(10);
  testing::expect_gradients_match([&](const std::vector<Tensor> &x) { return f(x[0]); }, {randn({5, 3})});
}

} // namespace
} // namespace kiln
