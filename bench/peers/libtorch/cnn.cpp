// bench/models/cnn.cpp (examples/models/cnn.h's DigitsCNN, C = 16) in
// LibTorch: 3x3 conv (padding 1, no bias) -> BatchNorm2d -> ReLU stem, a
// residual block relu(x + bn(conv(ConvBNReLU(x)))), max_pool2d 2,
// ConvBNReLU(C, 2C), avg_pool2d 4, Linear(2C, 10); images [128, 1, 8, 8],
// cross-entropy, AdamW 1e-3.
#include "harness.h"

namespace {

using namespace kiln::zoo::libtorch;

constexpr int64_t kChannels = 16;

/// 3x3 conv (padding 1, no bias) -> BatchNorm2d -> optional ReLU.
struct ConvBNImpl : torch::nn::Module {
  ConvBNImpl(int64_t in, int64_t out, bool relu)
      : relu(relu),
        conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(out))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    torch::Tensor y = bn(conv(x));
    return relu ? torch::relu(y) : y;
  }
  bool relu;
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
};
TORCH_MODULE(ConvBN);

struct DigitsCnn : ZooModule {
  DigitsCnn()
      : stem(register_module("stem", ConvBN(1, kChannels, true))),
        conv1(register_module("conv1", ConvBN(kChannels, kChannels, true))),
        conv2(register_module("conv2", ConvBN(kChannels, kChannels, false))),
        widen(register_module("widen", ConvBN(kChannels, 2 * kChannels, true))),
        head(register_module("head", torch::nn::Linear(2 * kChannels, 10))) {}
  torch::Tensor forward(const torch::Tensor &x) override {
    torch::Tensor h = stem(x);
    h = torch::relu(h + conv2(conv1(h)));  // the residual block
    h = torch::max_pool2d(h, {2, 2});
    h = torch::avg_pool2d(widen(h), {4, 4});
    return head(h.flatten(1));
  }
  ConvBN stem, conv1, conv2, widen;
  torch::nn::Linear head;
};

const bool registered = register_model({
    "cnn", "DigitsCNN (C=16): conv-BN-ReLU, residual block, max/avg pool; [128, 1, 8, 8], AdamW 1e-3",
    [] { return std::make_shared<DigitsCnn>(); },
    [] { return Batch{torch::rand({128, 1, 8, 8}), torch::randint(10, {128})}; },
    classification_loss});

}  // namespace
