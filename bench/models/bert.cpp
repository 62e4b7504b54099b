// A BERT-style encoder (Devlin et al. 2019) trained on masked-token
// prediction: token (padding_idx 0) + position embeddings, LayerNorm, 2
// post-LN encoder layers (multi-head self-attention with a key padding mask
// computed from the ids, GELU MLP 4x), a vocabulary head; cross-entropy with
// ignore_index -100 on the masked positions only. Vocabulary 1000, d_model
// 128, 4 heads; ids [16, 64] with rows padded to 32..64 tokens; AdamW 1e-3.
#include <algorithm>

#include "harness.h"

namespace {

using namespace kiln;

constexpr int64_t kVocab = 1000, kBatch = 16, kLen = 64, kDModel = 128, kHeads = 4, kLayers = 2;
constexpr int64_t kPad = 0, kMaskToken = 1;

/// x [B, T, D], key_padding_mask [B, T] bool (true = padding) -> [B, T, D].
class EncoderLayer : public nn::Module {
public:
  EncoderLayer() {
    attn_ = register_module("attn", std::make_shared<nn::MultiheadAttention>(kDModel, kHeads));
    ln1_ = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{kDModel}));
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(kDModel, 4 * kDModel));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(4 * kDModel, kDModel));
    ln2_ = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{kDModel}));
  }
  Tensor forward(const Tensor &x) override { return forward(x, Tensor()); }
  Tensor forward(const Tensor &x, const Tensor &key_padding_mask) {
    Tensor h = ln1_->forward(x + attn_->forward(x, x, x, Tensor(), false, key_padding_mask));
    return ln2_->forward(h + fc2_->forward(gelu(fc1_->forward(h))));
  }
  std::string name() const override { return "EncoderLayer"; }

private:
  std::shared_ptr<nn::MultiheadAttention> attn_;
  std::shared_ptr<nn::LayerNorm> ln1_, ln2_;
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

/// int64 ids [B, T] -> logits [B, T, vocab].
class Encoder : public nn::Module {
public:
  Encoder() {
    tok_ = register_module("tok", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(kVocab, kDModel).padding_idx(kPad)));
    pos_ = register_module("pos", std::make_shared<nn::Embedding>(kLen, kDModel));
    ln_ = register_module("ln", std::make_shared<nn::LayerNorm>(Shape{kDModel}));
    layers_ = register_module("layers", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < kLayers; ++i) layers_->push_back(std::make_shared<EncoderLayer>());
    head_ = register_module("head", std::make_shared<nn::Linear>(kDModel, kVocab));
  }
  Tensor forward(const Tensor &ids) override {
    const Tensor padding = eq(ids, scalar_tensor(kPad, kInt64, ids.device()));
    Tensor x = ln_->forward(tok_->forward(ids) + pos_->forward(arange(ids.size(1), kInt64, ids.device())));
    for (int64_t i = 0; i < kLayers; ++i) x = layers_->at<EncoderLayer>(i)->forward(x, padding);
    return head_->forward(x);
  }
  std::string name() const override { return "Encoder"; }

private:
  std::shared_ptr<nn::Embedding> tok_, pos_;
  std::shared_ptr<nn::LayerNorm> ln_;
  std::shared_ptr<nn::ModuleList> layers_;
  std::shared_ptr<nn::Linear> head_;
};

/// Ids with row b padded after 32 + (b * 13) % 33 tokens; 15% of the real
/// tokens replaced by the mask token and predicted (the rest ignored).
zoo::Batch masked_batch() {
  std::vector<int64_t> ids = zoo::random_labels({kBatch, kLen}, kVocab - 2).to_vector<int64_t>();
  std::vector<float> pick = rand({kBatch, kLen}).to_vector<float>();
  std::vector<int64_t> target(ids.size(), -100);
  for (int64_t b = 0; b < kBatch; ++b) {
    const int64_t length = 32 + (b * 13) % 33;
    for (int64_t t = 0; t < kLen; ++t) {
      int64_t &id = ids[b * kLen + t];
      id = t < length ? id + 2 : kPad;
      if (t < length && pick[b * kLen + t] < 0.15f) {
        target[b * kLen + t] = id;
        id = kMaskToken;
      }
    }
  }
  return {tensor(ids, {kBatch, kLen}), tensor(target, {kBatch, kLen})};
}

const bool registered = zoo::register_model({
    "bert", "BERT-style encoder, 2 post-LN layers, d_model 128, 4 heads, vocab 1000; ids [16, 64] padded, "
            "masked-token cross-entropy (ignore_index -100), AdamW 1e-3",
    [] { return std::make_shared<Encoder>(); },
    masked_batch,
    zoo::classification_loss});

}  // namespace
