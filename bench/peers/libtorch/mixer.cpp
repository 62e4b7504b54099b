// bench/models/mixer.cpp in LibTorch: MLP-Mixer on synthetic 3x32x32 images,
// 4x4 patches (64 tokens of 48 values) embedded to 128 channels, 4 blocks of
// token mixing (MLP 64 -> 128 -> 64 on the transposed activations) and
// channel mixing (MLP 128 -> 512 -> 128), pre-LayerNorm, exact GELU; mean
// over tokens, 10 classes; batch 64, AdamW 1e-3.
#include "harness.h"

namespace {

using namespace kiln::zoo::libtorch;

constexpr int64_t kPatch = 4, kTokens = 64, kChannels = 128, kBlocks = 4;

/// Linear -> GELU -> Linear over the last dim: [*, d] -> [*, d].
/// The layers are constructed one by one: the order of a call's arguments is
/// unspecified and the weights' random draws follow it.
torch::nn::Sequential mlp(int64_t d, int64_t hidden) {
  torch::nn::Linear fc1(d, hidden);
  torch::nn::Linear fc2(hidden, d);
  return torch::nn::Sequential(fc1, torch::nn::GELU(), fc2);
}

struct MixerBlockImpl : torch::nn::Module {
  MixerBlockImpl()
      : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kChannels})))),
        tokens(register_module("token_mlp", mlp(kTokens, kTokens * 2))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kChannels})))),
        channels(register_module("channel_mlp", mlp(kChannels, kChannels * 4))) {}
  /// x [B, tokens, channels] -> same shape.
  torch::Tensor forward(const torch::Tensor &x) {
    torch::Tensor h = x + tokens->forward(ln1(x).transpose(1, 2)).transpose(1, 2);
    return h + channels->forward(ln2(h));
  }
  torch::nn::LayerNorm ln1;
  torch::nn::Sequential tokens;
  torch::nn::LayerNorm ln2;
  torch::nn::Sequential channels;
};
TORCH_MODULE(MixerBlock);

struct Mixer : ZooModule {
  Mixer()
      : embed(register_module("embed", torch::nn::Linear(3 * kPatch * kPatch, kChannels))),
        blocks(register_module("blocks", make_blocks())),
        ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kChannels})))),
        head(register_module("head", torch::nn::Linear(kChannels, 10))) {}
  /// The blocks, drawn before the head's weights as in PyTorch 2's peer.
  static torch::nn::Sequential make_blocks() {
    torch::nn::Sequential blocks;
    for (int64_t i = 0; i < kBlocks; ++i) blocks->push_back(MixerBlock());
    return blocks;
  }
  /// images [B, 3, 32, 32] -> logits [B, 10].
  torch::Tensor forward(const torch::Tensor &images) override {
    const int64_t B = images.size(0), n = 32 / kPatch;
    torch::Tensor patches = images.reshape({B, 3, n, kPatch, n, kPatch}).permute({0, 2, 4, 1, 3, 5});
    torch::Tensor x = embed(patches.reshape({B, kTokens, 3 * kPatch * kPatch}));
    return head(ln(blocks->forward(x)).mean({1}));
  }
  torch::nn::Linear embed;
  torch::nn::Sequential blocks;
  torch::nn::LayerNorm ln;
  torch::nn::Linear head;
};

const bool registered = register_model({
    "mixer", "MLP-Mixer, 4x4 patches of 3x32x32, 64 tokens, 128 channels, 4 blocks; batch 64, AdamW 1e-3",
    [] { return std::make_shared<Mixer>(); },
    [] { return Batch{torch::randn({64, 3, 32, 32}), torch::randint(10, {64})}; },
    classification_loss});

}  // namespace
