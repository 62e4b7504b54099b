// MLP-Mixer (Tolstikhin et al. 2021) on synthetic 3x32x32 images: 4x4
// patches (64 tokens of 48 values) embedded to 128 channels, 4 blocks of
// token mixing (an MLP across the 64 tokens, on the transposed activations)
// and channel mixing (an MLP 128 -> 512 -> 128), pre-LayerNorm, GELU; mean
// over tokens, 10 classes. Stresses transposes and layout changes. Batch 64,
// AdamW 1e-3.
#include "harness.h"

namespace {

using namespace kiln;

constexpr int64_t kPatch = 4, kTokens = 64, kChannels = 128, kBlocks = 4;

/// Linear -> GELU -> Linear over the last dim: [*, d] -> [*, d].
std::shared_ptr<nn::Sequential> mlp(int64_t d, int64_t hidden) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(d, hidden), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(hidden, d)});
}

/// x [B, tokens, channels] -> same shape.
class MixerBlock : public nn::Module {
public:
  MixerBlock() {
    ln1_ = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{kChannels}));
    tokens_ = register_module("token_mlp", mlp(kTokens, kTokens * 2));
    ln2_ = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{kChannels}));
    channels_ = register_module("channel_mlp", mlp(kChannels, kChannels * 4));
  }
  Tensor forward(const Tensor &x) override {
    Tensor h = x + tokens_->forward(ln1_->forward(x).transpose(1, 2)).transpose(1, 2);
    return h + channels_->forward(ln2_->forward(h));
  }
  std::string name() const override { return "MixerBlock"; }

private:
  std::shared_ptr<nn::LayerNorm> ln1_, ln2_;
  std::shared_ptr<nn::Sequential> tokens_, channels_;
};

/// images [B, 3, 32, 32] -> logits [B, 10].
class Mixer : public nn::Module {
public:
  Mixer() {
    embed_ = register_module("embed", std::make_shared<nn::Linear>(3 * kPatch * kPatch, kChannels));
    blocks_ = register_module("blocks", std::make_shared<nn::Sequential>());
    for (int64_t i = 0; i < kBlocks; ++i) blocks_->push_back(std::make_shared<MixerBlock>());
    ln_ = register_module("ln", std::make_shared<nn::LayerNorm>(Shape{kChannels}));
    head_ = register_module("head", std::make_shared<nn::Linear>(kChannels, 10));
  }
  Tensor forward(const Tensor &images) override {
    const int64_t B = images.size(0), n = 32 / kPatch;
    Tensor patches = images.reshape({B, 3, n, kPatch, n, kPatch}).permute({0, 2, 4, 1, 3, 5});
    Tensor x = embed_->forward(patches.reshape({B, kTokens, 3 * kPatch * kPatch}));
    return head_->forward(mean(ln_->forward(blocks_->forward(x)), {1}));
  }
  std::string name() const override { return "Mixer"; }

private:
  std::shared_ptr<nn::Linear> embed_, head_;
  std::shared_ptr<nn::Sequential> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_;
};

const bool registered = zoo::register_model({
    "mixer", "MLP-Mixer, 4x4 patches of 3x32x32, 64 tokens, 128 channels, 4 blocks; batch 64, AdamW 1e-3",
    [] { return std::make_shared<Mixer>(); },
    [] { return zoo::Batch{randn({64, 3, 32, 32}), zoo::random_labels({64}, 10)}; },
    zoo::classification_loss});

}  // namespace
