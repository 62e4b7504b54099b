// Indexing compiled without graph breaks: embedding / index_select / gather
// as kiln.gather (backward kiln.scatter_add), scatter_add, and the index
// checks every compiled call makes (runtime/IndexCheck.h).
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "compare.h"

namespace kiln {
namespace {
using test_models::expect_close;
using test_models::expect_grads_close;

/// An embedding with a pointwise consumer (fused with the gather).
struct Embed : nn::Module {
  std::shared_ptr<nn::Embedding> emb;
  Embed(int64_t vocab, int64_t dim) { emb = register_module("emb", std::make_shared<nn::Embedding>(vocab, dim)); }
  Tensor forward(const Tensor &ids) override { return tanh(emb->forward(ids)) * 2.0; }
  std::string name() const override { return "Embed"; }
};

/// index_select and gather of a parameter, and a scatter_add into another.
struct Indexing : nn::Module {
  Tensor w, s, base, columns, rows;
  Indexing() {
    w = register_parameter("w", randn({6, 5}));
    s = register_parameter("s", randn({3, 5}));
    base = register_parameter("base", randn({4, 5}));
    columns = tensor(std::vector<int64_t>{4, 0, 0, 1, 3, 2, 2, 2, 1, 0, 4, 4, 3, 1, 0, 1, 1, 2}, {6, 3});
    rows = tensor(std::vector<int64_t>{1, 1, 3, 0, 2, 2, 3, 3, 1, 1, 0, 1, 1, 2, 3}, {3, 5});  // repeated rows add up
  }
  Tensor forward(const Tensor &ids) override {
    Tensor a = tanh(index_select(w, 0, ids)).sum();
    Tensor b = exp(gather(w, 1, columns)).sum();
    Tensor c = sin(scatter_add(base, 0, rows, s * s)).sum();
    return a + b + c;
  }
  std::string name() const override { return "Indexing"; }
};

/// Runs `steps` forward+backward on eager and compiled copies (same seed).
template <class M, class... Args> void expect_matches_eager(const std::vector<Tensor> &inputs, Args... args) {
  manual_seed(3);
  auto eager = std::make_shared<M>(args...);
  manual_seed(3);
  auto inner = std::make_shared<M>(args...);
  auto compiled = compile(inner);
  for (const Tensor &x : inputs) {
    eager->zero_grad();
    compiled->zero_grad();
    Tensor want = eager->forward(x), got = compiled->forward(x);
    expect_close(got, want, 1e-5, 1e-6, "forward");
    want.sum().backward();
    got.sum().backward();
    expect_grads_close(*eager, *inner, 1e-5, 1e-6);
  }
  EXPECT_TRUE(compiled->graph_breaks().empty());
  EXPECT_EQ(compiled->stats().graph_break_segments, 0);
}

Tensor ids(std::vector<int64_t> v, Shape shape) { return tensor(v, shape); }

TEST(CompileIndexing, EmbeddingMatchesEagerWithoutGraphBreaks) {
  // Repeated ids: their gradients accumulate in the scatter-add.
  expect_matches_eager<Embed>({ids({1, 7, 1, 0, 19, 7}, {2, 3}), ids({3, 3, 3, 3, 2, 19}, {2, 3})}, 20, 4);
}

TEST(CompileIndexing, LargeVocabularyEmbeddingCompilesAndRuns) {
  // A one-hot capture would hold [32, 50000] floats (6.4 MB) per call.
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 32; ++i) v.push_back((i * 7919) % 50000);
  v[5] = v[9];
  manual_seed(3);
  auto inner = std::make_shared<Embed>(50000, 16);
  auto compiled = compile(inner);
  manual_seed(3);
  Embed eager(50000, 16);
  Tensor x = ids(v, {4, 8});
  Tensor got = compiled->forward(x), want = eager.forward(x);
  expect_close(got, want, 1e-6, 1e-6, "forward");
  got.sum().backward();
  want.sum().backward();
  expect_close(inner->emb->weight.grad(), eager.emb->weight.grad(), 1e-6, 1e-6, "weight grad");
  const CompileStats &st = compiled->stats();
  EXPECT_TRUE(compiled->graph_breaks().empty());
  EXPECT_LT(st.peak_activation_bytes(), int64_t{32} * 50000 * 4 / 8) << "planned as a one-hot?";
}

TEST(CompileIndexing, IndexSelectGatherScatterAddMatchEager) {
  expect_matches_eager<Indexing>({ids({5, 0, 5, 2, 2}, {5}), ids({1, 3, 1, 4, 0}, {5})});
}

/// The message eager raises for `x`.
std::string eager_error(nn::Module &m, const Tensor &x) {
  try {
    m.forward(x);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(CompileIndexing, OutOfRangeIndexRaisesOnEveryCachedCall) {
  manual_seed(3);
  auto inner = std::make_shared<Embed>(20, 4);
  auto compiled = compile(inner);
  compiled->forward(ids({1, 2, 3, 4, 5, 6}, {2, 3}));
  ASSERT_EQ(compiled->stats().compiles, 1);
  for (int64_t bad : {20, -1, 25}) {
    Tensor x = ids({1, 2, bad, 4, 50, 6}, {2, 3});
    const std::string want = eager_error(*inner, x);
    ASSERT_EQ(want, "embedding: index " + std::to_string(bad) + " is out of range for a table of 20 embeddings (expected 0..19)");
    for (int call = 0; call < 3; ++call) {
      try {
        compiled->forward(x);
        ADD_FAILURE() << "no error for index " << bad << " on call " << call;
      } catch (const Error &e) {
        EXPECT_EQ(std::string(e.what()), want) << "call " << call;
      }
    }
  }
  EXPECT_EQ(compiled->stats().compiles, 1);  // every call above was a cached one
  Tensor ok = ids({0, 19, 19, 4, 5, 6}, {2, 3});
  expect_close(compiled->forward(ok), inner->forward(ok), 1e-6, 1e-6, "after the errors");
}

TEST(CompileIndexing, OutOfRangeIndexSelectNamesTheOp) {
  manual_seed(3);
  auto inner = std::make_shared<Indexing>();
  auto compiled = compile(inner);
  compiled->forward(ids({5, 0, 5, 2, 2}, {5}));
  EXPECT_THROW(
      {
        try {
          compiled->forward(ids({5, 0, 6, 2, 2}, {5}));
        } catch (const Error &e) {
          EXPECT_EQ(std::string(e.what()), "index_select: index 6 is out of bounds for dimension 0 with size 6");
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace kiln
