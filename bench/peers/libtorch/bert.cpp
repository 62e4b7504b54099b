// bench/models/bert.cpp in LibTorch: a BERT-style encoder, token
// (padding_idx 0) + position embeddings, LayerNorm, 2 post-LN encoder layers
// (torch::nn::MultiheadAttention with the key padding mask computed from the
// ids, GELU MLP 4x), a vocabulary head; masked-token cross-entropy with
// ignore_index -100. Vocabulary 1000, d_model 128, 4 heads; ids [16, 64],
// rows padded to 32..64 tokens; AdamW 1e-3. LibTorch 1.13's
// MultiheadAttention takes [T, B, D] (no batch_first): the layer transposes
// around it, as PyTorch 2's batch_first module does inside.
#include "harness.h"

namespace {

using namespace kiln::zoo::libtorch;

constexpr int64_t kVocab = 1000, kBatch = 16, kLen = 64, kDModel = 128, kHeads = 4, kLayers = 2;
constexpr int64_t kPad = 0, kMaskToken = 1;
constexpr double kMaskFraction = 0.15;  ///< of the real tokens, masked and predicted (BERT's rate)

struct EncoderLayerImpl : torch::nn::Module {
  EncoderLayerImpl()
      : attn(register_module("attn", torch::nn::MultiheadAttention(kDModel, kHeads))),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDModel})))),
        fc1(register_module("fc1", torch::nn::Linear(kDModel, 4 * kDModel))),
        fc2(register_module("fc2", torch::nn::Linear(4 * kDModel, kDModel))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDModel})))) {}
  /// x [B, T, D], key_padding_mask [B, T] bool (true = padding) -> [B, T, D].
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &key_padding_mask) {
    const torch::Tensor xt = x.transpose(0, 1);  // [T, B, D]
    torch::Tensor a = std::get<0>(attn(xt, xt, xt, key_padding_mask, /*need_weights=*/false)).transpose(0, 1);
    torch::Tensor h = ln1(x + a);
    return ln2(h + fc2(torch::gelu(fc1(h))));
  }
  torch::nn::MultiheadAttention attn;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear fc1, fc2;
  torch::nn::LayerNorm ln2;
};
TORCH_MODULE(EncoderLayer);

struct Encoder : ZooModule {
  Encoder()
      : tok(register_module("tok", torch::nn::Embedding(torch::nn::EmbeddingOptions(kVocab, kDModel).padding_idx(kPad)))),
        pos(register_module("pos", torch::nn::Embedding(kLen, kDModel))),
        ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDModel})))),
        layers(register_module("layers", torch::nn::ModuleList())),
        head(register_module("head", torch::nn::Linear(kDModel, kVocab))) {
    for (int64_t i = 0; i < kLayers; ++i) layers->push_back(EncoderLayer());
  }
  /// ids [B, T] int64 -> logits [B, T, vocab].
  torch::Tensor forward(const torch::Tensor &ids) override {
    const torch::Tensor padding = ids.eq(kPad);
    torch::Tensor x = ln(tok(ids) + pos(torch::arange(ids.size(1))));
    for (const auto &layer : *layers) x = layer->as<EncoderLayerImpl>()->forward(x, padding);
    return head(x);
  }
  torch::nn::Embedding tok, pos;
  torch::nn::LayerNorm ln;
  torch::nn::ModuleList layers;
  torch::nn::Linear head;
};

/// Ids with row b padded after 32 + (b * 13) % 33 tokens; 15% of the real
/// tokens replaced by the mask token and predicted (the rest ignored).
Batch masked_batch() {
  torch::Tensor ids = torch::randint(2, kVocab, {kBatch, kLen});
  const torch::Tensor lengths = 32 + (torch::arange(kBatch) * 13) % 33;
  const torch::Tensor real = torch::arange(kLen).unsqueeze(0) < lengths.unsqueeze(1);
  const torch::Tensor picked = real & (torch::rand({kBatch, kLen}) < kMaskFraction);
  torch::Tensor target = torch::where(picked, ids, torch::full_like(ids, -100));
  ids = torch::where(picked, torch::full_like(ids, kMaskToken), torch::where(real, ids, torch::full_like(ids, kPad)));
  return {ids, target};
}

const bool registered = register_model({
    "bert", "BERT-style encoder, 2 post-LN layers, d_model 128, 4 heads, vocab 1000; ids [16, 64] padded, "
            "masked-token cross-entropy (ignore_index -100), AdamW 1e-3",
    [] { return std::make_shared<Encoder>(); },
    masked_batch,
    classification_loss});

}  // namespace
