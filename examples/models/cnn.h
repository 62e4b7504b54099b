// examples/models/cnn.h - the small residual CNN of kiln-train-cnn, shared
// with the model zoo (bench/models/cnn.cpp) so both run the same model.
//
// DigitsCNN: images [N, 1, 8, 8] float32 (the UCI digits) -> logits [N, 10]:
//   stem      ConvBNReLU(1, C)                      [N, C, 8, 8]
//   block     relu(x + bn(conv(ConvBNReLU(x))))     [N, C, 8, 8]  (He et al. 2016's basic block)
//   pool      max_pool2d 2                          [N, C, 4, 4]
//   widen     ConvBNReLU(C, 2C)                     [N, 2C, 4, 4]
//   pool      avg_pool2d 4                          [N, 2C, 1, 1]
//   head      Linear(2C, 10) on the flattened features
// Every conv is 3x3 with padding 1 and no bias (the BatchNorm that follows
// has one), as torchvision's ResNets. Throws kiln::Error (from conv2d) for an
// input that is not [N, 1, 8, 8]-compatible.
#pragma once

#include <memory>
#include <string>

#include "kiln/kiln.h"

namespace kiln::models {

/// 3x3 conv (padding 1, no bias) -> BatchNorm2d -> optional ReLU:
/// [N, C_in, H, W] -> [N, C_out, H, W].
class ConvBN : public nn::Module {
public:
  ConvBN(int64_t in_channels, int64_t out_channels, bool relu) : relu_(relu) {
    conv_ = register_module(
        "conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(in_channels, out_channels, 3).padding(1).bias(false)));
    bn_ = register_module("bn", std::make_shared<nn::BatchNorm2d>(out_channels));
  }
  Tensor forward(const Tensor &x) override {
    Tensor y = bn_->forward(conv_->forward(x));
    return relu_ ? kiln::relu(y) : y;
  }
  std::string name() const override { return "ConvBN"; }

private:
  bool relu_;
  std::shared_ptr<nn::Conv2d> conv_;
  std::shared_ptr<nn::BatchNorm2d> bn_;
};

/// relu(x + ConvBN(ConvBNReLU(x))): [N, C, H, W] -> [N, C, H, W].
class ResidualBlock : public nn::Module {
public:
  explicit ResidualBlock(int64_t channels) {
    first_ = register_module("conv1", std::make_shared<ConvBN>(channels, channels, /*relu=*/true));
    second_ = register_module("conv2", std::make_shared<ConvBN>(channels, channels, /*relu=*/false));
  }
  Tensor forward(const Tensor &x) override { return kiln::relu(x + second_->forward(first_->forward(x))); }
  std::string name() const override { return "ResidualBlock"; }

private:
  std::shared_ptr<ConvBN> first_, second_;
};

/// The table at the top of this file; `channels` is C.
class DigitsCNN : public nn::Module {
public:
  explicit DigitsCNN(int64_t channels = 16) {
    stem_ = register_module("stem", std::make_shared<ConvBN>(1, channels, /*relu=*/true));
    block_ = register_module("block", std::make_shared<ResidualBlock>(channels));
    widen_ = register_module("widen", std::make_shared<ConvBN>(channels, 2 * channels, /*relu=*/true));
    head_ = register_module("head", std::make_shared<nn::Linear>(2 * channels, 10));
  }
  Tensor forward(const Tensor &x) override {
    namespace F = kiln::nn::functional;
    Tensor h = F::max_pool2d(block_->forward(stem_->forward(x)), {2, 2});
    h = F::avg_pool2d(widen_->forward(h), {4, 4});
    return head_->forward(h.flatten(1));
  }
  std::string name() const override { return "DigitsCNN"; }

private:
  std::shared_ptr<ConvBN> stem_, widen_;
  std::shared_ptr<ResidualBlock> block_;
  std::shared_ptr<nn::Linear> head_;
};

}  // namespace kiln::models
