// The GPT of kiln-train-gpt (examples/models/gpt.h): 2 layers, d_model 128,
// 4 heads, context 64, vocabulary 96, dropout 0; batch 16, next-token
// cross-entropy, AdamW 1e-3.
#include "harness.h"
#include "models/gpt.h"

namespace {

using namespace kiln;

constexpr int64_t kVocab = 96, kBatch = 16, kContext = 64;

const bool registered = zoo::register_model({
    "gpt", "GPT 2 layers, d_model 128, 4 heads, vocab 96, dropout 0; tokens [16, 64], AdamW 1e-3",
    [] { return std::make_shared<models::GPT>(kVocab, kContext, 2, 128, 4, /*dropout=*/0.0); },
    [] {
      return zoo::Batch{zoo::random_labels({kBatch, kContext}, kVocab), zoo::random_labels({kBatch, kContext}, kVocab)};
    },
    zoo::classification_loss});

}  // namespace
