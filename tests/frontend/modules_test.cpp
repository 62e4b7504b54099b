// nn modules and nn::init: state_dict keys equal PyTorch's (lists printed by
// tests/golden/modules/gen_modules.py), train/eval behaviour, dtype
// conversion, containers, initialisers checked by their statistics (the RNG
// differs from PyTorch's), and bad arguments/inputs (suite ModulesBadInput).
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "kiln/init.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

#include "bad_cases.h"

namespace kiln {
namespace {

using Keys = std::vector<std::string>;

Keys state_keys(const nn::Module &m) {
  Keys out;
  for (auto &kv : m.state_dict()) out.push_back(kv.first);
  return out;
}

std::vector<double> v(const Tensor &t) { return t.to_vector<double>(); }

double sample_mean(const Tensor &t) {
  double s = 0;
  for (double x : v(t)) s += x;
  return s / static_cast<double>(t.numel());
}

double sample_std(const Tensor &t) {
  const double m = sample_mean(t);
  double s = 0;
  for (double x : v(t)) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(t.numel()));
}

double max_abs(const Tensor &t) {
  double m = 0;
  for (double x : v(t)) m = std::max(m, std::abs(x));
  return m;
}

// ---- state_dict keys (from gen_modules.py's output) ---------------------------------------

TEST(ModulesStateDict, KeysMatchPyTorch) {
  EXPECT_EQ(state_keys(nn::Conv2d(3, 4, 3)), (Keys{"weight", "bias"}));
  EXPECT_EQ(state_keys(nn::Conv2d(nn::Conv2dOptions(4, 6, 3).groups(2).bias(false))), (Keys{"weight"}));
  const Keys bn{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"};
  EXPECT_EQ(state_keys(nn::BatchNorm1d(5)), bn);
  EXPECT_EQ(state_keys(nn::BatchNorm2d(3)), bn);
  EXPECT_EQ(state_keys(nn::BatchNorm2d(nn::BatchNormOptions(3).affine(false).track_running_stats(false))), Keys{});
  EXPECT_EQ(state_keys(nn::BatchNorm2d(nn::BatchNormOptions(3).track_running_stats(false))),
            (Keys{"weight", "bias"}));
  EXPECT_EQ(state_keys(nn::LayerNorm(Shape{8})), (Keys{"weight", "bias"}));
  EXPECT_EQ(state_keys(nn::LayerNorm(nn::LayerNormOptions({6}).elementwise_affine(false))), Keys{});
  EXPECT_EQ(state_keys(nn::Embedding(10, 4)), Keys{"weight"});
  EXPECT_EQ(state_keys(nn::MultiheadAttention(8, 2)),
            (Keys{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(state_keys(nn::MultiheadAttention(nn::MultiheadAttentionOptions(8, 2).bias(false))),
            (Keys{"in_proj_weight", "out_proj.weight"}));
  EXPECT_EQ(state_keys(nn::GELU()), Keys{});
  EXPECT_EQ(state_keys(nn::Dropout()), Keys{});
  nn::Sequential seq{std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 4, 3).padding(1)),
                     std::make_shared<nn::BatchNorm2d>(4), std::make_shared<nn::GELU>(),
                     std::make_shared<nn::Conv2d>(4, 3, 1)};
  EXPECT_EQ(state_keys(seq), (Keys{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                   "1.num_batches_tracked", "3.weight", "3.bias"}));
}

struct Holder : nn::Module {
  Holder() {
    blocks.push_back(std::make_shared<nn::Linear>(2, 2));
    blocks.push_back(std::make_shared<nn::LayerNorm>(Shape{2}));
    heads.insert("cls", std::make_shared<nn::Linear>(2, 3));
    heads.insert("norm", std::make_shared<nn::BatchNorm1d>(3));
    extra.push_back(zeros({2}));
    extra.push_back(ones({1, 2}));
    register_module("blocks", blocks);
    register_module("heads", heads);
    register_module("extra", extra);
    register_module("attn", std::make_shared<nn::MultiheadAttention>(4, 2));
    register_module("emb", std::make_shared<nn::Embedding>(3, 2));
  }
  Tensor forward(const Tensor &x) override { return blocks[0]->forward(x); }
  std::string name() const override { return "Holder"; }
  nn::ModuleList blocks;  // held by value
  nn::ModuleDict heads;
  nn::ParameterList extra;
};

TEST(ModulesStateDict, ContainerKeysMatchPyTorch) {
  Holder h;
  EXPECT_EQ(state_keys(h), (Keys{"blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias",
                                 "heads.cls.weight", "heads.cls.bias", "heads.norm.weight", "heads.norm.bias",
                                 "heads.norm.running_mean", "heads.norm.running_var", "heads.norm.num_batches_tracked",
                                 "extra.0", "extra.1", "attn.in_proj_weight", "attn.in_proj_bias",
                                 "attn.out_proj.weight", "attn.out_proj.bias", "emb.weight"}));
  EXPECT_EQ(h.parameters().size(), 15u);
  EXPECT_EQ(h.buffers().size(), 3u);
}

// ---- layers ------------------------------------------------------------------------------

TEST(Modules, Conv2dShapesAndPyTorchInit) {
  manual_seed(0);
  nn::Conv2d conv(nn::Conv2dOptions(4, 8, {3, 5}).stride({2, 1}).padding({1, 2}).dilation(2).groups(2));
  EXPECT_EQ(conv.weight.sizes(), (Shape{8, 2, 3, 5}));
  const double bound = 1.0 / std::sqrt(2.0 * 3 * 5);  // kaiming_uniform(a = sqrt(5)) on fan_in 30
  EXPECT_LE(max_abs(conv.weight), bound * (1 + 1e-6));
  EXPECT_LE(max_abs(conv.bias), bound * (1 + 1e-6));
  EXPECT_TRUE(conv.weight.requires_grad());
  Tensor y = conv.forward(randn({2, 4, 9, 10}));
  // H: (9 + 2 - 2*2 - 1)/2 + 1 = 4; W: (10 + 4 - 2*4 - 1)/1 + 1 = 6.
  EXPECT_EQ(y.sizes(), (Shape{2, 8, 4, 6}));
  EXPECT_EQ(conv.forward(randn({4, 9, 10})).sizes(), (Shape{8, 4, 6}));  // unbatched
}

TEST(Modules, BatchNormTrainUpdatesRunningStatsEvalUsesThem) {
  nn::BatchNorm1d bn(nn::BatchNormOptions(2).momentum(0.5));
  Tensor x = tensor({1.f, 10.f, 3.f, 20.f}, {2, 2});  // channel 0: {1, 3}, channel 1: {10, 20}
  Tensor y = bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  // mean {2, 15}; unbiased var {2, 50}; running = 0.5 * init + 0.5 * batch.
  EXPECT_NEAR(v(bn.running_mean)[0], 1.0, 1e-6);
  EXPECT_NEAR(v(bn.running_mean)[1], 7.5, 1e-6);
  EXPECT_NEAR(v(bn.running_var)[0], 1.5, 1e-5);
  EXPECT_NEAR(v(bn.running_var)[1], 25.5, 1e-5);
  EXPECT_NEAR(v(y)[0], -1.0, 1e-4);  // batch statistics: (1 - 2) / sqrt(1 + eps)

  bn.eval();
  Tensor before = bn.running_mean.clone();
  Tensor z = bn.forward(x);
  EXPECT_EQ(v(bn.running_mean), v(before));
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
  EXPECT_NEAR(v(z)[0], (1.0 - 1.0) / std::sqrt(1.5 + 1e-5), 1e-5);
  EXPECT_NEAR(v(z)[3], (20.0 - 7.5) / std::sqrt(25.5 + 1e-5), 1e-5);
  bn.reset_running_stats();
  EXPECT_EQ(bn.num_batches_tracked.item(), 0.0);
  EXPECT_EQ(v(bn.running_var), (std::vector<double>{1.0, 1.0}));
}

TEST(Modules, BatchNormWithoutRunningStatsAlwaysUsesBatch) {
  nn::BatchNorm2d bn(nn::BatchNormOptions(3).track_running_stats(false));
  EXPECT_FALSE(bn.running_mean.defined());
  EXPECT_TRUE(bn.buffers().empty());
  bn.eval();
  Tensor y = bn.forward(randn({4, 3, 2, 2}) * 5.0 + 3.0);
  EXPECT_NEAR(sample_mean(y), 0.0, 1e-5);
}

TEST(Modules, DropoutTrainEval) {
  manual_seed(1);
  nn::Dropout drop(0.25);
  Tensor x = ones({100, 100});
  Tensor y = drop.forward(x);
  int64_t zeros_seen = 0;
  for (double e : v(y)) {
    if (e == 0) ++zeros_seen;
    else EXPECT_NEAR(e, 1.0 / 0.75, 1e-6);
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / 1e4, 0.25, 0.02);
  drop.eval();
  EXPECT_EQ(v(drop.forward(x)), v(x));
  nn::Sequential seq{std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Dropout>(0.9)};
  seq.eval();
  Tensor in = randn({3, 4});
  EXPECT_EQ(v(seq.forward(in)), v(seq.forward(in)));  // deterministic in eval
  EXPECT_EQ(v(nn::Dropout(0.0).forward(x)), v(x));
}

TEST(Modules, EmbeddingLookupInitAndPaddingIdx) {
  manual_seed(3);
  nn::Embedding big(1000, 64);
  EXPECT_NEAR(sample_mean(big.weight), 0.0, 0.02);
  EXPECT_NEAR(sample_std(big.weight), 1.0, 0.02);
  nn::Embedding emb(nn::EmbeddingOptions(5, 3).padding_idx(-1));
  EXPECT_EQ(*emb.options.padding_idx(), 4);
  EXPECT_EQ(v(emb.weight.narrow(0, 4, 1)), (std::vector<double>{0, 0, 0}));
  Tensor idx = tensor(std::vector<int64_t>{4, 1, 4, 0, 2, 1}, {2, 3});
  Tensor y = emb.forward(idx);
  EXPECT_EQ(y.sizes(), (Shape{2, 3, 3}));
  EXPECT_EQ(v(y.narrow(0, 0, 1).narrow(1, 1, 1)), v(emb.weight.narrow(0, 1, 1)));
  y.sum().backward();
  auto g = v(emb.weight.grad());
  EXPECT_EQ(g[4 * 3], 0.0);  // padding row gets no gradient
  EXPECT_EQ(g[1 * 3], 2.0);  // row 1 looked up twice
}

TEST(Modules, LayerNormNormalizesTrailingDims) {
  nn::LayerNorm ln(nn::LayerNormOptions({4, 5}).eps(1e-6));
  Tensor y = ln.forward(randn({3, 4, 5}) * 4.0 + 2.0);
  for (int64_t i = 0; i < 3; ++i) {
    Tensor row = y.narrow(0, i, 1);
    EXPECT_NEAR(sample_mean(row), 0.0, 1e-5);
    EXPECT_NEAR(sample_std(row), 1.0, 1e-4);
  }
}

TEST(Modules, ActivationsMatchOps) {
  Tensor x = tensor({-2.f, -0.5f, 0.f, 1.5f}, {4});
  EXPECT_EQ(v(nn::GELU("tanh").forward(x)), v(gelu(x, "tanh")));
  EXPECT_EQ(v(nn::GELU().forward(x)), v(gelu(x)));
  EXPECT_EQ(v(nn::SiLU().forward(x)), v(silu(x)));
}

TEST(Modules, MultiheadAttentionShapesInitAndCausality) {
  manual_seed(5);
  nn::MultiheadAttention mha(8, 2);
  EXPECT_EQ(mha.head_dim, 4);
  EXPECT_EQ(max_abs(mha.in_proj_bias), 0.0);
  EXPECT_EQ(max_abs(mha.out_proj->bias), 0.0);
  EXPECT_LE(max_abs(mha.in_proj_weight), std::sqrt(6.0 / (8 + 24)) * (1 + 1e-6));  // xavier on [24, 8]
  Tensor x = randn({2, 5, 8});
  EXPECT_EQ(mha.forward(x).sizes(), (Shape{2, 5, 8}));
  EXPECT_EQ(mha.forward(randn({2, 3, 8}), x, x).sizes(), (Shape{2, 3, 8}));
  EXPECT_EQ(mha.forward(randn({5, 8})).sizes(), (Shape{5, 8}));  // unbatched

  // Causal: changing the last position leaves the earlier outputs unchanged.
  Tensor y1 = mha.forward(x, x, x, Tensor(), /*is_causal=*/true);
  Tensor x2 = x.clone();
  {
    NoGradGuard no_grad;
    x2.narrow(1, 4, 1).fill_(7.0);
  }
  Tensor y2 = mha.forward(x2, x2, x2, Tensor(), true);
  auto a = v(y1.narrow(1, 0, 4)), b = v(y2.narrow(1, 0, 4));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
  EXPECT_GT(std::abs(v(y1.narrow(1, 4, 1))[0] - v(y2.narrow(1, 4, 1))[0]), 1e-6);

  // batch_first(false): [L, N, E] in and out, same numbers transposed.
  nn::MultiheadAttention seq_first(nn::MultiheadAttentionOptions(8, 2).batch_first(false));
  seq_first.load_state_dict(mha.state_dict());
  auto c = v(seq_first.forward(x.transpose(0, 1)).transpose(0, 1).contiguous()), d = v(mha.forward(x));
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], d[i], 1e-5);
}

// ---- dtype conversion ----------------------------------------------------------------------

TEST(Modules, ToFloat64KeepsHandlesValid) {
  nn::Sequential seq{std::make_shared<nn::Conv2d>(2, 3, 3), std::make_shared<nn::BatchNorm2d>(3)};
  auto conv = std::dynamic_pointer_cast<nn::Conv2d>(seq.named_children()[0].second);
  auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(seq.named_children()[1].second);
  Tensor weight_handle = conv->weight;
  std::vector<float> before = conv->weight.to_vector<float>();
  seq.to(kFloat64);
  EXPECT_EQ(conv->weight.dtype(), kFloat64);
  EXPECT_EQ(weight_handle.dtype(), kFloat64);
  EXPECT_EQ(seq.named_parameters()[0].second.impl(), conv->weight.impl());
  EXPECT_TRUE(conv->weight.requires_grad());
  EXPECT_EQ(bn->running_mean.dtype(), kFloat64);
  EXPECT_EQ(bn->num_batches_tracked.dtype(), kInt64);  // integer buffers keep their dtype
  auto after = v(conv->weight);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], static_cast<double>(before[i]));

  nn::ParameterList list{zeros({2})};
  Tensor p = list[0];
  list.to(kFloat64);
  EXPECT_EQ(p.dtype(), kFloat64);
  EXPECT_EQ(list[0].impl(), p.impl());
}

// ---- containers ------------------------------------------------------------------------------

TEST(ModulesContainers, ModuleList) {
  nn::ModuleList list{std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::ReLU>()};
  list.push_back(std::make_shared<nn::Linear>(3, 1));
  EXPECT_EQ(list.size(), 3u);
  EXPECT_EQ(list[-1]->name(), "Linear");
  EXPECT_EQ(list.at<nn::Linear>(2)->in_features, 3);
  std::vector<std::string> names;
  for (auto &m : list) names.push_back(m->name());
  EXPECT_EQ(names, (std::vector<std::string>{"Linear", "ReLU", "Linear"}));
  EXPECT_EQ(state_keys(list), (Keys{"0.weight", "0.bias", "2.weight", "2.bias"}));
  Tensor x = ones({4, 2});
  for (auto &m : list) x = m->forward(x);
  EXPECT_EQ(x.sizes(), (Shape{4, 1}));
  list.eval();
  EXPECT_FALSE(list[0]->is_training());
  try {
    list.forward(x);
    FAIL() << "expected kiln::Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("ModuleList has no forward"), std::string::npos) << e.what();
  }
}

TEST(ModulesContainers, ModuleDictKeepsInsertionOrder) {
  nn::ModuleDict dict{{"zeta", std::make_shared<nn::ReLU>()}, {"alpha", std::make_shared<nn::Linear>(2, 2)}};
  dict.insert("mid", std::make_shared<nn::GELU>());
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"zeta", "alpha", "mid"}));
  EXPECT_TRUE(dict.contains("alpha"));
  EXPECT_FALSE(dict.contains("beta"));
  EXPECT_EQ(dict.at("mid")->name(), "GELU");
  dict.insert("zeta", std::make_shared<nn::Linear>(2, 5));  // replace keeps the position
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"zeta", "alpha", "mid"}));
  EXPECT_EQ(dict.at<nn::Linear>("zeta")->out_features, 5);
  EXPECT_EQ(state_keys(dict), (Keys{"zeta.weight", "zeta.bias", "alpha.weight", "alpha.bias"}));
  std::vector<std::string> seen;
  for (auto &[k, m] : dict) seen.push_back(k + ":" + m->name());
  EXPECT_EQ(seen, (std::vector<std::string>{"zeta:Linear", "alpha:Linear", "mid:GELU"}));
  EXPECT_THROW(dict.forward(ones({1})), Error);
}

TEST(ModulesContainers, ParameterList) {
  nn::ParameterList list;
  Tensor a = list.push_back(ones({2}));
  list.push_back(zeros({3, 1}));
  EXPECT_EQ(list.size(), 2u);
  EXPECT_TRUE(a.requires_grad());
  EXPECT_EQ(state_keys(list), (Keys{"0", "1"}));
  EXPECT_EQ(list[1].sizes(), (Shape{3, 1}));
  EXPECT_EQ(list.parameters()[0].impl(), a.impl());
  (list[0] * 3.0).sum().backward();
  EXPECT_EQ(v(a.grad()), (std::vector<double>{3, 3}));
  size_t n = 0;
  for (const Tensor &p : list) n += static_cast<size_t>(p.numel());
  EXPECT_EQ(n, 5u);
  EXPECT_THROW(list.forward(a), Error);
}

// ---- nn::init --------------------------------------------------------------------------------

TEST(Init, FanAndGain) {
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out(zeros({5, 3})), (std::pair<int64_t, int64_t>{3, 5}));
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out(zeros({8, 4, 3, 2})), (std::pair<int64_t, int64_t>{24, 48}));
  EXPECT_THROW(nn::init::calculate_fan_in_and_fan_out(zeros({5})), Error);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("conv2d"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("selu"), 0.75);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1 + 1e-4)));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
}

TEST(Init, UniformNormalTruncNormalConstant) {
  manual_seed(11);
  Tensor t = Tensor::empty({200, 300});
  nn::init::uniform_(t, -2.0, 3.0);
  for (double x : v(t)) ASSERT_TRUE(x >= -2.0 && x < 3.0);
  EXPECT_NEAR(sample_mean(t), 0.5, 0.02);
  EXPECT_NEAR(sample_std(t), 5.0 / std::sqrt(12.0), 0.02);
  nn::init::normal_(t, 1.5, 0.5);
  EXPECT_NEAR(sample_mean(t), 1.5, 0.005);
  EXPECT_NEAR(sample_std(t), 0.5, 0.005);
  nn::init::trunc_normal_(t, 0.0, 1.0, -2.0, 2.0);
  EXPECT_LE(max_abs(t), 2.0);
  EXPECT_NEAR(sample_mean(t), 0.0, 0.01);
  EXPECT_NEAR(sample_std(t), 0.8796, 0.01);  // std of N(0, 1) truncated to [-2, 2]
  nn::init::trunc_normal_(t, 0.0, 1.0, 1.0, 1.5);
  for (double x : v(t)) ASSERT_TRUE(x >= 1.0 && x <= 1.5);
  nn::init::constant_(t, 0.25);
  EXPECT_EQ(max_abs(t - 0.25), 0.0);
  nn::init::ones_(t);
  EXPECT_EQ(sample_mean(t), 1.0);
  nn::init::zeros_(t);
  EXPECT_EQ(max_abs(t), 0.0);
}

TEST(Init, XavierAndKaimingStatistics) {
  manual_seed(12);
  Tensor w = Tensor::empty({256, 128, 3, 3});  // fan_in 1152, fan_out 2304
  const double fan_in = 128 * 9, fan_out = 256 * 9;
  nn::init::xavier_uniform_(w, 2.0);
  const double xb = 2.0 * std::sqrt(6.0 / (fan_in + fan_out));
  EXPECT_LE(max_abs(w), xb * (1 + 1e-6));
  EXPECT_NEAR(sample_std(w), xb / std::sqrt(3.0), xb * 0.01);
  nn::init::xavier_normal_(w);
  EXPECT_NEAR(sample_std(w), std::sqrt(2.0 / (fan_in + fan_out)), 0.01 * std::sqrt(2.0 / (fan_in + fan_out)));
  nn::init::kaiming_uniform_(w, 0.0, "fan_out", "relu");
  const double kb = std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(fan_out);
  EXPECT_LE(max_abs(w), kb * (1 + 1e-6));
  EXPECT_GT(max_abs(w), kb * 0.99);
  nn::init::kaiming_normal_(w, 0.0, "fan_in", "relu");
  EXPECT_NEAR(sample_std(w), std::sqrt(2.0 / fan_in), 0.01 * std::sqrt(2.0 / fan_in));
  EXPECT_NEAR(sample_mean(w), 0.0, 0.001);
}

TEST(Init, WorksOnParametersAndFloat64) {
  Tensor p = zeros({4, 4}).requires_grad_();
  nn::init::kaiming_uniform_(p, std::sqrt(5.0));  // no guard needed
  EXPECT_TRUE(p.requires_grad());
  EXPECT_TRUE(p.is_leaf());
  EXPECT_LE(max_abs(p), 0.5 * (1 + 1e-6));  // 1 / sqrt(fan_in = 4)
  EXPECT_GT(max_abs(p), 0.0);
  Tensor d = zeros({1000}, kFloat64);
  nn::init::normal_(d, 0.0, 2.0);
  EXPECT_EQ(d.dtype(), kFloat64);
  EXPECT_NEAR(sample_std(d), 2.0, 0.15);
  Tensor empty = zeros({0, 3});
  EXPECT_NO_THROW(nn::init::kaiming_normal_(empty));
}

// ---- bad arguments and inputs ----------------------------------------------------------------

using test_support::BadCase;

std::vector<BadCase> bad_cases() {
  using namespace nn;
  return {
      {"conv zero channels", [] { Conv2d(0, 4, 3); }, {"Conv2d", "in_channels", "0"}},
      {"conv groups", [] { Conv2d(Conv2dOptions(4, 6, 3).groups(3)); }, {"Conv2d", "in_channels (4)", "groups (3)"}},
      {"conv stride", [] { Conv2d(Conv2dOptions(1, 1, 3).stride({1, 0})); }, {"Conv2d", "stride", "(1, 0)"}},
      {"conv padding", [] { Conv2d(Conv2dOptions(1, 1, 3).padding(-1)); }, {"Conv2d", "padding", "(-1, -1)"}},
      {"conv channels", [] { Conv2d(3, 4, 3).forward(ones({1, 2, 5, 5})); }, {"Conv2d", "3 channels", "[1, 2, 5, 5]"}},
      {"conv rank", [] { Conv2d(3, 4, 3).forward(ones({3, 5})); }, {"Conv2d", "4-D", "[3, 5]"}},
      {"conv too small", [] { Conv2d(1, 1, 5).forward(ones({1, 1, 3, 3})); }, {"Conv2d", "[1, 1, 3, 3]", "(5, 5)"}},
      {"bn features", [] { BatchNorm2d(0); }, {"BatchNorm2d", "num_features", "0"}},
      {"bn eps", [] { BatchNorm1d(BatchNormOptions(3).eps(-1)); }, {"BatchNorm1d", "eps", "-1"}},
      {"bn1d rank", [] { BatchNorm1d(3).forward(ones({2, 3, 4, 4})); }, {"BatchNorm1d", "4D", "[2, 3, 4, 4]"}},
      {"bn2d rank", [] { BatchNorm2d(3).forward(ones({2, 3})); }, {"BatchNorm2d", "4D", "[2, 3]"}},
      {"bn channels", [] { BatchNorm2d(3).forward(ones({2, 4, 2, 2})); }, {"BatchNorm2d", "3 channels", "[2, 4, 2, 2]"}},
      {"bn one value", [] { BatchNorm1d(3).forward(ones({1, 3})); }, {"BatchNorm1d", "more than 1 value", "[1, 3]"}},
      {"ln shape", [] { LayerNorm(Shape{0}); }, {"LayerNorm", "normalized_shape", "[0]"}},
      {"ln input", [] { LayerNorm(Shape{4}).forward(ones({2, 5})); }, {"LayerNorm", "[2, 5]", "4"}},
      {"dropout p", [] { Dropout(1.5); }, {"Dropout", "1.5"}},
      {"gelu approx", [] { GELU("fast"); }, {"GELU", "'fast'"}},
      {"emb sizes", [] { Embedding(0, 3); }, {"Embedding", "num_embeddings", "0"}},
      {"emb padding", [] { Embedding(EmbeddingOptions(4, 2).padding_idx(4)); }, {"Embedding", "padding_idx", "4"}},
      {"emb float", [] { Embedding(4, 2).forward(ones({3})); }, {"Embedding", "int64", "float32"}},
      {"emb range", [] { Embedding(4, 2).forward(tensor(std::vector<int64_t>{1, 7}, {2})); },
       {"embedding", "index 7", "table of 4 embeddings", "0..3"}},  // the gather's check: the same in compiled calls
      {"mha heads", [] { MultiheadAttention(10, 3); }, {"MultiheadAttention", "embed_dim (10)", "num_heads (3)"}},
      {"mha embed", [] { MultiheadAttention(8, 2).forward(ones({2, 3, 6})); }, {"MultiheadAttention", "[2, 3, 6]"}},
      {"mha kv len", [] { MultiheadAttention(8, 2).forward(ones({2, 3, 8}), ones({2, 4, 8}), ones({2, 5, 8})); },
       {"MultiheadAttention", "[2, 4, 8]", "[2, 5, 8]"}},
      {"mha mask", [] { MultiheadAttention(8, 2).forward(ones({2, 3, 8}), ones({2, 4, 8}), ones({2, 4, 8}), ones({3, 3})); },
       {"MultiheadAttention", "attn_mask", "[3, 4]", "[3, 3]"}},
      {"mha kpm",
       [] {
         MultiheadAttention(8, 2).forward(ones({2, 3, 8}), ones({2, 4, 8}), ones({2, 4, 8}), Tensor(), false,
                                          ones({2, 3}));
       },
       {"MultiheadAttention", "key_padding_mask", "[2, 4]", "[2, 3]"}},
      {"list index", [] { ModuleList{std::make_shared<ReLU>()}[3]; }, {"ModuleList", "index 3", "size 1"}},
      {"list null", [] { ModuleList().push_back(nullptr); }, {"ModuleList", "null"}},
      {"dict missing", [] { ModuleDict().at("enc"); }, {"ModuleDict", "'enc'"}},
      {"dict dotted", [] { ModuleDict().insert("a.b", std::make_shared<ReLU>()); }, {"'a.b'"}},
      {"dict forward", [] { ModuleDict().forward(ones({1})); }, {"ModuleDict has no forward"}},
      {"plist index", [] { ParameterList{ones({1})}[-2]; }, {"ParameterList", "index -2"}},
      {"plist int", [] { ParameterList().push_back(ones({1}, kInt64)); }, {"ParameterList", "int64"}},
      {"init 1-d fan", [] { Tensor t = zeros({3}); init::xavier_uniform_(t); }, {"fan", "[3]"}},
      {"init mode", [] { Tensor t = zeros({3, 3}); init::kaiming_normal_(t, 0, "fan_avg"); }, {"kaiming_normal_", "'fan_avg'"}},
      {"init gain", [] { init::calculate_gain("swish"); }, {"calculate_gain", "'swish'"}},
      {"init int", [] { Tensor t = zeros({3}, kInt64); init::normal_(t); }, {"normal_", "int64"}},
      {"init bounds", [] { Tensor t = zeros({3}); init::uniform_(t, 1, 0); }, {"uniform_", "a=1", "b=0"}},
  };
}

TEST(ModulesBadInput, ThrowsNamingModuleAndValue) {
  test_support::expect_kiln_errors(bad_cases());
}

}  // namespace
}  // namespace kiln
