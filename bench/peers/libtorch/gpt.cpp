// bench/models/gpt.cpp (examples/models/gpt.h) in LibTorch: GPT, 2
// pre-LayerNorm blocks, d_model 128, 4 heads, vocabulary 96, context 64,
// dropout 0, MLP 4x with GELU "tanh", lm_head without bias, nanoGPT's
// initialization; tokens [16, 64], next-token cross-entropy, AdamW 1e-3.
// LibTorch 1.13 has no scaled_dot_product_attention: the attention is the
// math path (q k^T / sqrt(hd), causal mask, softmax, @ v), as Kiln's eager one.
#include <cmath>

#include "harness.h"

namespace {

using namespace kiln::zoo::libtorch;

constexpr int64_t kVocab = 96, kBatch = 16, kContext = 64, kLayers = 2, kDModel = 128, kHeads = 4;

struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : ln1(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDModel})))),
        q(register_module("q_proj", torch::nn::Linear(kDModel, kDModel))),
        k(register_module("k_proj", torch::nn::Linear(kDModel, kDModel))),
        v(register_module("v_proj", torch::nn::Linear(kDModel, kDModel))),
        out(register_module("out_proj", torch::nn::Linear(kDModel, kDModel))),
        ln2(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDModel})))),
        fc(register_module("fc", torch::nn::Linear(kDModel, 4 * kDModel))),
        proj(register_module("proj", torch::nn::Linear(4 * kDModel, kDModel))) {}
  /// x [B, T, D] -> [B, T, D].
  torch::Tensor forward(const torch::Tensor &x) {
    const int64_t B = x.size(0), T = x.size(1), hd = kDModel / kHeads;
    auto heads = [&](const torch::Tensor &t) { return t.view({B, T, kHeads, hd}).transpose(1, 2); };  // [B, H, T, hd]
    const torch::Tensor h = ln1(x);
    torch::Tensor scores = torch::matmul(heads(q(h)), heads(k(h)).transpose(-2, -1)) / std::sqrt(double(hd));
    const torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
    torch::Tensor y = torch::matmul(torch::softmax(scores.masked_fill(future, -INFINITY), -1), heads(v(h)));
    torch::Tensor r = x + out(y.transpose(1, 2).reshape({B, T, kDModel}));
    return r + proj(torch::gelu(fc(ln2(r)), "tanh"));
  }
  torch::nn::LayerNorm ln1;
  torch::nn::Linear q, k, v, out;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc, proj;
};
TORCH_MODULE(Block);

struct Gpt : ZooModule {
  Gpt()
      : wte(register_module("wte", torch::nn::Embedding(kVocab, kDModel))),
        wpe(register_module("wpe", torch::nn::Embedding(kContext, kDModel))),
        blocks(register_module("h", torch::nn::ModuleList())),
        ln_f(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDModel})))),
        lm_head(register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(kDModel, kVocab).bias(false)))) {
    for (int64_t i = 0; i < kLayers; ++i) blocks->push_back(Block());
    init_weights();
  }
  /// nanoGPT's init, as examples/models/gpt.h: N(0, 0.02) weights, zero
  /// biases, N(0, 0.02 / sqrt(2 L)) for the projections into the residual.
  void init_weights() {
    torch::NoGradGuard no_grad;
    for (auto &m : modules(/*include_self=*/false)) {
      if (auto *lin = m->as<torch::nn::Linear>()) {
        lin->weight.normal_(0.0, 0.02);
        if (lin->bias.defined()) lin->bias.zero_();
      } else if (auto *emb = m->as<torch::nn::Embedding>()) {
        emb->weight.normal_(0.0, 0.02);
      }
    }
    for (const auto &b : *blocks)
      for (auto *lin : {b->as<BlockImpl>()->out.get(), b->as<BlockImpl>()->proj.get()})
        lin->weight.normal_(0.0, 0.02 / std::sqrt(2.0 * kLayers));
  }
  torch::Tensor forward(const torch::Tensor &idx) override {
    torch::Tensor x = wte(idx) + wpe(torch::arange(idx.size(1)));
    for (const auto &b : *blocks) x = b->as<BlockImpl>()->forward(x);
    return lm_head(ln_f(x));
  }
  torch::nn::Embedding wte, wpe;
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f;
  torch::nn::Linear lm_head;
};

const bool registered = register_model({
    "gpt", "GPT 2 layers, d_model 128, 4 heads, vocab 96, dropout 0; tokens [16, 64], AdamW 1e-3",
    [] { return std::make_shared<Gpt>(); },
    [] { return Batch{torch::randint(kVocab, {kBatch, kContext}), torch::randint(kVocab, {kBatch, kContext})}; },
    classification_loss});

}  // namespace
