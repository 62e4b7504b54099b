// bench/models/mlp.cpp in LibTorch: digits MLP 64 -> 128 -> ReLU -> 10,
// batch 512 (random pixels and labels), cross-entropy, AdamW 1e-3.
#include "harness.h"

namespace {

using namespace kiln::zoo::libtorch;

struct Mlp : ZooModule {
  Mlp() {
    // Constructed one by one: the order of a call's arguments is unspecified
    // and the weights' random draws follow it (PyTorch 2's peer draws first-to-last).
    torch::nn::Linear fc1(64, 128);
    torch::nn::Linear fc2(128, 10);
    layers = register_module("layers", torch::nn::Sequential(fc1, torch::nn::ReLU(), fc2));
  }
  torch::Tensor forward(const torch::Tensor &x) override { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};

const bool registered = register_model({
    "mlp", "digits MLP 64-128-10, batch 512, AdamW 1e-3",
    [] { return std::make_shared<Mlp>(); },
    [] { return Batch{torch::rand({512, 64}), torch::randint(10, {512})}; },
    classification_loss});

}  // namespace
