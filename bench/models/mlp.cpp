// The digits MLP of kiln-train-digits: 64 -> 128 -> ReLU -> 10, batch 512,
// cross-entropy, AdamW 1e-3 (random pixels and labels of the digits' shapes).
#include "harness.h"

namespace {

using namespace kiln;

std::shared_ptr<nn::Module> digits_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

const bool registered = zoo::register_model({
    "mlp", "digits MLP 64-128-10, batch 512, AdamW 1e-3",
    digits_mlp,
    [] { return zoo::Batch{rand({512, 64}), zoo::random_labels({512}, 10)}; },
    zoo::classification_loss});

}  // namespace
