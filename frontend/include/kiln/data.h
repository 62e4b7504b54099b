// kiln/data.h - datasets and batching.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::data {

/// Features and labels held in memory. features [N, ...], labels [N].
struct TensorDataset {
  Tensor features;
  Tensor labels;
  int64_t size() const { return features.defined() ? features.size(0) : 0; }
};

/// Reads the UCI optical digits CSV (gzip or plain): rows of 64 pixel values
/// 0..16 then the label 0..9. Returns features [N, 64] float32 scaled to
/// [0, 1] (divided by 16) and labels [N] int64. Throws kiln::Error naming the
/// file and line on a missing file, a short row or an out-of-range value.
TensorDataset load_digits(const std::string &path);

/// Rows `indices` (int64 [M]) of `t` ([N, ...]) -> [M, ...]; a copy.
Tensor index_rows(const Tensor &t, const std::vector<int64_t> &indices);

/// A random permutation of [0, n) from Philox (seed) via Fisher-Yates.
std::vector<int64_t> randperm(int64_t n, uint64_t seed);

/// Splits reproducibly: shuffles with `seed`, the last `test_size` rows are
/// the test set. Throws if test_size is not in [1, N-1].
std::pair<TensorDataset, TensorDataset> train_test_split(const TensorDataset &ds, int64_t test_size,
                                                         uint64_t seed);

/// Mini-batches over a TensorDataset (a minimal torch DataLoader):
/// reshuffles each epoch from (seed, epoch) when shuffle is set.
class DataLoader {
public:
  DataLoader(TensorDataset dataset, int64_t batch_size, bool shuffle = true, uint64_t seed = 0,
             bool drop_last = false);
  /// Batches of one epoch, in order. Each call to epoch() advances the epoch.
  std::vector<std::pair<Tensor, Tensor>> epoch();
  int64_t num_batches() const;

private:
  TensorDataset ds_;
  int64_t batch_size_;
  bool shuffle_, drop_last_;
  uint64_t seed_;
  uint64_t epoch_ = 0;
};

}  // namespace kiln::data
