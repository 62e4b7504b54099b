// nn modules against PyTorch 1.13 (tests/golden/modules/modules.json, written
// by tests/golden/modules/gen_modules.py). Each case: build the same module
// from the case's attrs, check the state_dict keys, load PyTorch's weights,
// run forward in the recorded mode, backpropagate the recorded grad_output and
// compare the output, the input and parameter gradients and (BatchNorm in
// train mode) the updated running statistics. float32, 1e-5 relative.
#include <gtest/gtest.h>

#include "../golden/golden.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace kiln {
namespace {

using nlohmann::json;

/// The module of gen_modules.py's Holder: one of each container.
struct Holder : nn::Module {
  Holder() {
    blocks->push_back(std::make_shared<nn::Linear>(2, 2));
    blocks->push_back(std::make_shared<nn::LayerNorm>(Shape{2}));
    heads->insert("cls", std::make_shared<nn::Linear>(2, 3));
    heads->insert("norm", std::make_shared<nn::BatchNorm1d>(3));
    extra->push_back(zeros({2}));
    extra->push_back(ones({1, 2}));
    register_module("blocks", blocks);
    register_module("heads", heads);
    register_module("extra", extra);
    register_module("attn", std::make_shared<nn::MultiheadAttention>(4, 2));
    register_module("emb", std::make_shared<nn::Embedding>(3, 2));
  }
  Tensor forward(const Tensor &x) override { return (*blocks)[0]->forward(x); }
  std::string name() const override { return "Holder"; }
  std::shared_ptr<nn::ModuleList> blocks = std::make_shared<nn::ModuleList>();
  std::shared_ptr<nn::ModuleDict> heads = std::make_shared<nn::ModuleDict>();
  std::shared_ptr<nn::ParameterList> extra = std::make_shared<nn::ParameterList>();
};

nn::IntPair pair_of(const json &j) { return {j.at(0).get<int64_t>(), j.at(1).get<int64_t>()}; }

nn::BatchNormOptions batch_norm_options(const json &a) {
  nn::BatchNormOptions o(a.at("num_features").get<int64_t>());
  o.eps(a.at("eps").get<double>()).affine(a.at("affine").get<bool>());
  o.track_running_stats(a.at("track_running_stats").get<bool>());
  if (a.at("momentum").is_null()) o.momentum(std::nullopt);
  else o.momentum(a.at("momentum").get<double>());
  return o;
}

/// The Kiln module for a case's attrs (the same constructor arguments).
std::shared_ptr<nn::Module> build(const json &a) {
  const std::string kind = a.at("module").get<std::string>();
  if (kind == "Conv2d")
    return std::make_shared<nn::Conv2d>(
        nn::Conv2dOptions(a.at("in").get<int64_t>(), a.at("out").get<int64_t>(), pair_of(a.at("kernel")))
            .stride(pair_of(a.at("stride")))
            .padding(pair_of(a.at("padding")))
            .dilation(pair_of(a.at("dilation")))
            .groups(a.at("groups").get<int64_t>())
            .bias(a.at("bias").get<bool>()));
  if (kind == "BatchNorm1d") return std::make_shared<nn::BatchNorm1d>(batch_norm_options(a));
  if (kind == "BatchNorm2d") return std::make_shared<nn::BatchNorm2d>(batch_norm_options(a));
  if (kind == "LayerNorm")
    return std::make_shared<nn::LayerNorm>(nn::LayerNormOptions(a.at("normalized_shape").get<Shape>())
                                               .eps(a.at("eps").get<double>())
                                               .elementwise_affine(a.at("affine").get<bool>()));
  if (kind == "Embedding") {
    nn::EmbeddingOptions o(a.at("num_embeddings").get<int64_t>(), a.at("embedding_dim").get<int64_t>());
    if (!a.at("padding_idx").is_null()) o.padding_idx(a.at("padding_idx").get<int64_t>());
    return std::make_shared<nn::Embedding>(o);
  }
  if (kind == "GELU") return std::make_shared<nn::GELU>(a.at("approximate").get<std::string>());
  if (kind == "SiLU") return std::make_shared<nn::SiLU>();
  if (kind == "ReLU") return std::make_shared<nn::ReLU>();
  if (kind == "MultiheadAttention")
    return std::make_shared<nn::MultiheadAttention>(
        nn::MultiheadAttentionOptions(a.at("embed_dim").get<int64_t>(), a.at("num_heads").get<int64_t>())
            .bias(a.at("bias").get<bool>()));
  if (kind == "SequentialConvBnGelu")
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 4, 3).padding(1)), std::make_shared<nn::BatchNorm2d>(4),
        std::make_shared<nn::GELU>(), std::make_shared<nn::Conv2d>(4, 3, 1)});
  if (kind == "Holder") return std::make_shared<Holder>();
  throw Error("golden_modules_test: unknown module " + kind);
}

/// Runs the module on the case's forward inputs (floats require grad).
Tensor run_forward(nn::Module &m, const json &attrs, std::map<std::string, Tensor> &in) {
  auto get = [&](const std::string &k) { return in.count(k) ? in.at(k) : Tensor(); };
  if (auto *mha = dynamic_cast<nn::MultiheadAttention *>(&m)) {
    const bool causal = attrs.at("is_causal").get<bool>();
    if (attrs.at("self_attention").get<bool>() && !causal && !in.count("attn_mask")) return mha->forward(in.at("x"));
    Tensor q = in.count("x") ? in.at("x") : in.at("q");
    Tensor k = in.count("x") ? in.at("x") : in.at("k");
    Tensor v = in.count("x") ? in.at("x") : in.at("v");
    return mha->forward(q, k, v, get("attn_mask"), causal, get("key_padding_mask"));
  }
  return m.forward(in.at("x"));
}

void check_case(const std::string &name, const golden::Case &c) {
  SCOPED_TRACE(name);
  auto module = build(c.attrs);
  module->train(c.attrs.at("train").get<bool>());

  std::vector<std::string> keys;
  for (auto &kv : module->state_dict()) keys.push_back(kv.first);
  EXPECT_EQ(keys, c.attrs.at("state_keys").get<std::vector<std::string>>()) << "state_dict keys";

  std::vector<std::pair<std::string, Tensor>> state;
  std::map<std::string, Tensor> in;
  for (auto &[k, v] : c.inputs) {
    if (k.rfind("state.", 0) == 0) {
      state.emplace_back(k.substr(6), v);
      continue;
    }
    Tensor t = v.clone();
    if (t.is_floating_point() && c.grads.count(k)) t.requires_grad_(true);
    in[k] = t;
  }
  module->load_state_dict(state);

  Tensor out = run_forward(*module, c.attrs, in);
  golden::expect_close(out, c.outputs.at("out0"), "out0");
  out.backward(c.outputs.at("grad_output"));

  std::map<std::string, Tensor> params;
  for (auto &[k, p] : module->named_parameters()) params[k] = p;
  std::map<std::string, Tensor> buffers;
  for (auto &[k, b] : module->named_buffers()) buffers[k] = b;
  for (auto &[k, g] : c.grads) {
    if (k.rfind("param.", 0) == 0) {
      ASSERT_TRUE(params.count(k.substr(6))) << "no parameter " << k;
      golden::expect_close(params.at(k.substr(6)).grad(), g, "grad " + k);
    } else {
      golden::expect_close(in.at(k).grad(), g, "grad " + k);
    }
  }
  for (auto &[k, v] : c.outputs) {
    if (k.rfind("state_after.", 0) != 0) continue;
    ASSERT_TRUE(buffers.count(k.substr(12))) << "no buffer " << k;
    golden::expect_close(buffers.at(k.substr(12)), v, k);
  }
}

class GoldenModules : public ::testing::Test {
protected:
  static const std::map<std::string, golden::Case> &cases() {
    static const auto all = golden::load("modules/modules.json");
    return all;
  }
  /// Checks every case whose name starts with `prefix`; at least `min_cases`.
  static void check_prefix(const std::string &prefix, size_t min_cases) {
    size_t n = 0;
    for (auto &[name, c] : cases())
      if (name.rfind(prefix, 0) == 0) {
        check_case(name, c);
        ++n;
      }
    EXPECT_GE(n, min_cases) << "cases named " << prefix << "*";
  }
};

TEST_F(GoldenModules, Conv2d) { check_prefix("conv2d_", 4); }
TEST_F(GoldenModules, BatchNorm1d) { check_prefix("batchnorm1d_", 3); }
TEST_F(GoldenModules, BatchNorm2d) { check_prefix("batchnorm2d_", 5); }
TEST_F(GoldenModules, LayerNorm) { check_prefix("layernorm_", 3); }
TEST_F(GoldenModules, Embedding) { check_prefix("embedding_", 2); }
TEST_F(GoldenModules, Activations) {
  check_prefix("gelu_", 2);
  check_prefix("silu", 1);
  check_prefix("relu", 1);
}
TEST_F(GoldenModules, MultiheadAttention) { check_prefix("mha_", 8); }
TEST_F(GoldenModules, SequentialConvBatchNormGelu) { check_prefix("sequential_", 1); }
TEST_F(GoldenModules, ContainersLoadPyTorchStateDict) { check_prefix("holder_keys", 1); }

}  // namespace
}  // namespace kiln
