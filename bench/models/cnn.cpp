// The residual CNN of kiln-train-cnn (examples/models/cnn.h: conv-BN-ReLU,
// a residual block, max and average pooling) on digit-shaped images
// [128, 1, 8, 8], cross-entropy, AdamW 1e-3.
#include "harness.h"
#include "models/cnn.h"

namespace {

using namespace kiln;

const bool registered = zoo::register_model({
    "cnn", "DigitsCNN (C=16): conv-BN-ReLU, residual block, max/avg pool; [128, 1, 8, 8], AdamW 1e-3",
    [] { return std::make_shared<models::DigitsCNN>(16); },
    [] { return zoo::Batch{rand({128, 1, 8, 8}), zoo::random_labels({128}, 10)}; },
    zoo::classification_loss});

}  // namespace
