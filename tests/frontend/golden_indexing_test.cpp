// Indexing/joining ops, embedding and losses (mse, BCE with logits,
// cross_entropy, nll_loss) against PyTorch golden values
// (tests/golden/indexing/gen_indexing.py). Dropout is tested by its
// properties in indexing_test.cpp (PyTorch's RNG differs).
#include "../golden/golden.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using golden::check_op;
using In = std::map<std::string, Tensor>;
using Outs = std::vector<Tensor>;

const std::map<std::string, golden::Case> &cases() {
  static auto c = golden::load("indexing/indexing.json");
  return c;
}

const golden::Case &get(const std::string &name) {
  auto it = cases().find(name);
  if (it == cases().end()) throw Error("golden case missing: " + name);
  return it->second;
}

/// Weighted concatenation of pieces (p_i * (i + 1)), so every piece's
/// gradient is checked: the PyTorch side computes the same.
Tensor weighted_cat(const std::vector<Tensor> &pieces, int64_t dim) {
  std::vector<Tensor> scaled;
  for (size_t i = 0; i < pieces.size(); ++i) scaled.push_back(pieces[i] * static_cast<double>(i + 1));
  return cat(scaled, dim);
}

F::Reduction reduction_of(const golden::Case &c) {
  const std::string r = c.attrs.at("reduction").get<std::string>();
  if (r == "none") return F::Reduction::None;
  if (r == "sum") return F::Reduction::Sum;
  return F::Reduction::Mean;
}

class GoldenIndexing : public ::testing::TestWithParam<std::string> {
protected:
  void run(const std::string &op, const std::function<Outs(In &)> &fn) {
    const std::string name = op + "_" + GetParam();
    check_op(get(name), name, fn);
  }
};

TEST_P(GoldenIndexing, IndexSelectGatherScatterAdd) {
  run("index_select_dim0", [](In &x) { return Outs{index_select(x["a"], 0, x["index"])}; });
  run("index_select_dim1", [](In &x) { return Outs{index_select(x["a"], -2, x["index"])}; });
  run("gather_dim1", [](In &x) { return Outs{gather(x["a"], 1, x["index"])}; });
  run("gather_dim0_smaller", [](In &x) { return Outs{gather(x["a"], 0, x["index"])}; });
  run("scatter_add_dim0", [](In &x) { return Outs{scatter_add(x["a"], 0, x["index"], x["src"])}; });
  run("scatter_add_dim1", [](In &x) { return Outs{scatter_add(x["a"], 1, x["index"], x["src"])}; });
}

TEST_P(GoldenIndexing, SliceWithStep) {
  run("slice_step2", [](In &x) { return Outs{slice(x["a"], 0, 1, 6, 2) * 1.0}; });
  run("slice_step3_neg", [](In &x) { return Outs{slice(x["a"], 1, -5, 100, 3) * 1.0}; });
}

TEST_P(GoldenIndexing, CatStack) {
  run("cat_dim0", [](In &x) { return Outs{cat({x["a"], x["b"], x["c"]}, 0)}; });
  run("cat_dim1", [](In &x) { return Outs{cat({x["a"], x["b"]}, -1)}; });
  run("stack_dim0", [](In &x) { return Outs{stack({x["a"], x["b"], x["c"]}, 0)}; });
  run("stack_last", [](In &x) { return Outs{stack({x["a"], x["b"]}, -1)}; });
}

TEST_P(GoldenIndexing, SplitChunk) {
  run("split", [](In &x) { return split(x["a"], 2, 1); });
  run("split_weighted", [](In &x) { return Outs{weighted_cat(split(x["a"], 2, 1), 1)}; });
  run("chunk", [](In &x) { return chunk(x["a"], 3, 0); });
  run("chunk_weighted", [](In &x) { return Outs{weighted_cat(chunk(x["a"], 3, 0), 0)}; });
}

TEST_P(GoldenIndexing, Embedding) {
  run("embedding", [](In &x) { return Outs{F::embedding(x["input"], x["weight"])}; });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GoldenIndexing, ::testing::Values("f32", "f64", "f16", "bf16"));

TEST(GoldenIndexingMisc, CatPromotesMixedDtypes) {
  check_op(get("cat_mixed_dtypes"), "cat_mixed_dtypes", [](In &x) { return Outs{cat({x["a"], x["b"]}, 0)}; });
}

TEST(GoldenIndexingMisc, IntegerTensors) {
  check_op(get("cat_int64"), "cat_int64", [](In &x) { return Outs{cat({x["a"], x["b"]}, 1)}; });
  check_op(get("gather_int64"), "gather_int64", [](In &x) { return Outs{gather(x["a"], 0, x["index"])}; });
  check_op(get("scatter_add_int64"), "scatter_add_int64",
           [](In &x) { return Outs{scatter_add(x["a"], 0, x["index"], x["src"])}; });
}

/// Runs every loss case whose name starts with `prefix` and ends in `_tag`;
/// cases whose name contains "_ignore_class_" run only when `ignore_class`.
void for_cases(const std::string &prefix, const std::string &tag,
               const std::function<Outs(In &, const golden::Case &)> &fn, bool ignore_class = false) {
  int seen = 0;
  for (const auto &[name, c] : cases()) {
    if (name.rfind(prefix, 0) != 0 || name.size() < tag.size() + 1 ||
        name.compare(name.size() - tag.size() - 1, std::string::npos, "_" + tag) != 0)
      continue;
    if ((name.find("_ignore_class_") != std::string::npos) != ignore_class) continue;
    const golden::Case &cref = c;
    check_op(c, name, [&](In &x) { return fn(x, cref); });
    ++seen;
  }
  EXPECT_GT(seen, 0) << "no golden cases " << prefix << "*_" << tag;
}

class GoldenLosses : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenLosses, MseLoss) {
  for_cases("mse_loss_", GetParam(),
            [](In &x, const golden::Case &c) { return Outs{F::mse_loss(x["input"], x["target"], reduction_of(c))}; });
}

TEST_P(GoldenLosses, BinaryCrossEntropyWithLogits) {
  for_cases("bce_logits_", GetParam(), [](In &x, const golden::Case &c) {
    Tensor pw = x.count("pos_weight") ? x["pos_weight"] : Tensor();
    return Outs{F::binary_cross_entropy_with_logits(x["input"], x["target"], reduction_of(c), pw)};
  });
}

Outs run_cross_entropy(In &x, const golden::Case &c) {
  return Outs{F::cross_entropy(x["logits"], x["target"], reduction_of(c), c.attrs.at("ignore_index").get<int64_t>(),
                               c.attrs.at("label_smoothing").get<double>())};
}

Outs run_nll_loss(In &x, const golden::Case &c) {
  return Outs{F::nll_loss(x["log_probs"], x["target"], reduction_of(c), c.attrs.at("ignore_index").get<int64_t>())};
}

TEST_P(GoldenLosses, CrossEntropy) { for_cases("cross_entropy_", GetParam(), run_cross_entropy); }
TEST_P(GoldenLosses, NllLoss) { for_cases("nll_loss_", GetParam(), run_nll_loss); }

// ignore_index naming a real class (2 of 4), as for a padding token: the
// rows with that target must contribute nothing.
TEST_P(GoldenLosses, CrossEntropyIgnoreIndexInsideClassRange) {
  for_cases("cross_entropy_", GetParam(), run_cross_entropy, /*ignore_class=*/true);
}
TEST_P(GoldenLosses, NllLossIgnoreIndexInsideClassRange) {
  for_cases("nll_loss_", GetParam(), run_nll_loss, /*ignore_class=*/true);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GoldenLosses, ::testing::Values("f32", "f64"));

}  // namespace
}  // namespace kiln
