// kiln/data.h - datasets and batching (PyTorch's torch.utils.data).
//
// | Kiln                     | PyTorch                                          |
// |--------------------------|--------------------------------------------------|
// | Dataset, Example         | map-style torch.utils.data.Dataset; LibTorch's   |
// |                          | torch::data::Example {data, target}              |
// | TensorDataset            | torch.utils.data.TensorDataset(features, labels) |
// | LambdaDataset            | a Dataset subclass whose __getitem__ calls a fn  |
// | default_collate          | torch.utils.data.default_collate (stack)         |
// | pad_collate              | collate_fn built on pad_sequence(batch_first)    |
// | DataLoader + Options     | torch.utils.data.DataLoader(dataset, ...)        |
// | worker_info()            | torch.utils.data.get_worker_info()               |
//
// A loader reads `get(index)` for each index of a batch, collates the
// Examples into a Batch and yields batches in order:
//
//   auto ds = std::make_shared<data::TensorDataset>(features, labels);
//   data::DataLoader loader(ds, data::DataLoaderOptions(32).shuffle(true).seed(7).num_workers(2));
//   for (int e = 0; e < epochs; ++e)
//     for (data::Batch &b : loader) step(b.data, b.target);   // one epoch per range-for
//
// Determinism: the batches of epoch e depend only on (options, e, dataset),
// never on num_workers or thread timing. Tensors produced here are CPU tensors
// without autograd history.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/random.h"
#include "kiln/tensor.h"

namespace kiln::data {

// ---- samples and datasets ---------------------------------------------------

/// One sample, as LibTorch's torch::data::Example: `data` is the input (any
/// shape and dtype), `target` its label or target; `target` may be left
/// undefined for unlabeled data (then batches have an undefined target too).
struct Example {
  Tensor data;
  Tensor target;
};

/// A map-style dataset: `size()` samples reachable by `get(0 .. size()-1)`.
///
/// Threading: with DataLoaderOptions::num_workers > 0, `get` is called
/// concurrently from the worker threads (never `size`, which the loader reads
/// on the consumer thread at the start of each epoch). Datasets that only read
/// their members are safe; ones that mutate state must lock. For random
/// augmentation draw from `worker_info()->generator`, not from kiln::randn /
/// the default generator (which is process-wide and not thread-safe).
class Dataset {
public:
  virtual ~Dataset() = default;
  /// Number of samples (>= 0).
  virtual int64_t size() const = 0;
  /// Sample `index` in [0, size()). Throwing is fine: the loader reports it as
  /// a kiln::Error naming the batch.
  virtual Example get(int64_t index) = 0;
};

/// Features and labels held in memory (torch.utils.data.TensorDataset).
/// features [N, ...], labels [N, ...] (usually int64 [N]) or undefined.
/// The fields stay public and assignable, and `TensorDataset{features, labels}`
/// builds one, as in earlier Kiln versions.
class TensorDataset : public Dataset {
public:
  TensorDataset() = default;
  /// Throws kiln::Error if features is 0-d or labels has a different number of
  /// rows than features ("TensorDataset: features have 4 rows but labels 3").
  TensorDataset(Tensor features, Tensor labels = Tensor());

  Tensor features;
  Tensor labels;

  /// Rows of features (0 if undefined).
  int64_t size() const override { return features.defined() ? features.size(0) : 0; }
  /// {features[index], labels[index]}: views sharing storage (no copy, no
  /// autograd history); features [N, D...] -> [D...], labels [N] -> 0-d.
  /// Throws kiln::Error naming the index when it is outside [0, size()).
  Example get(int64_t index) override;
  /// Throws kiln::Error (prefixed by `op`) when features/labels disagree.
  void check(const char *op) const;
};

/// A dataset from a function: `get(i)` calls `fn(i)`. The function must be
/// safe to call from several threads at once when num_workers > 0.
class LambdaDataset : public Dataset {
public:
  using GetFn = std::function<Example(int64_t index)>;
  /// Throws kiln::Error on a negative size or an empty function.
  LambdaDataset(int64_t size, GetFn fn);
  int64_t size() const override { return size_; }
  /// fn(index); throws kiln::Error naming the index when out of range.
  Example get(int64_t index) override;

private:
  int64_t size_;
  GetFn fn_;
};

/// std::make_shared<LambdaDataset>(size, fn) as a Dataset, ready for a DataLoader.
std::shared_ptr<Dataset> make_dataset(int64_t size, LambdaDataset::GetFn fn);

// ---- batches and collation --------------------------------------------------

/// A collated mini-batch of B examples.
struct Batch {
  /// default_collate: [B, ...]; pad_collate: [B, L_max, ...].
  Tensor data;
  /// [B, ...] (stacked, or padded by pad_collate when lengths differ);
  /// undefined when the examples had no target.
  Tensor target;
  /// int64 [B]: dim-0 length of each example's data (pad_collate only;
  /// undefined after default_collate).
  Tensor lengths;
  /// The dataset index of each example, in batch order (filled by DataLoader).
  std::vector<int64_t> indices;
  /// B (0 for an empty Batch).
  int64_t size() const { return data.defined() ? data.size(0) : 0; }
};

/// Turns the examples of one batch into a Batch. Runs on the worker threads
/// when num_workers > 0 (so it must be thread-safe) and may throw.
using CollateFn = std::function<Batch(const std::vector<Example> &examples)>;

/// Stacks same-shape examples (torch's default_collate): data [D...] x B ->
/// [B, D...], target likewise (0-d labels -> [B]); dtypes kept. Copies into
/// new contiguous tensors (no autograd history). Throws kiln::Error naming the
/// example when there are no examples, a tensor is undefined or not on cpu,
/// or shapes/dtypes differ from example 0 (suggesting pad_collate); targets
/// must be all defined or all undefined.
Batch default_collate(const std::vector<Example> &examples);

/// Collate for variable-length sequences: example data [L_i, D...] ->
/// data [B, max L_i, D...], padding rows filled with `padding_value`
/// (converted to the data dtype), and lengths int64 [B] = {L_i}. Targets are
/// stacked when they share a shape, otherwise padded the same way with
/// `target_padding_value` (e.g. -100 for cross_entropy's ignore_index).
/// Throws kiln::Error naming the example when data is 0-d, trailing dims or
/// dtypes differ, or as default_collate.
CollateFn pad_collate(double padding_value = 0.0, double target_padding_value = 0.0);

// ---- workers ----------------------------------------------------------------

/// What a worker thread knows about itself (torch.utils.data.WorkerInfo).
struct WorkerInfo {
  int64_t id = 0;           ///< 0 .. num_workers-1
  int64_t num_workers = 0;  ///< DataLoaderOptions::num_workers
  uint64_t epoch = 0;       ///< the epoch being loaded (0-based, as DataLoader::epochs_started()-1)
  uint64_t seed = 0;        ///< worker_seed(options.seed, epoch, id)
  /// Philox stream re-seeded with `seed` at the start of every epoch; owned by
  /// this worker thread, so drawing from it is safe and reproducible.
  Generator generator;
  const Dataset *dataset = nullptr;  ///< the loader's dataset
};

/// Inside a DataLoader worker thread (Dataset::get, collate_fn): that worker's
/// info. Elsewhere, including num_workers == 0 loading on the consumer
/// thread: nullptr (as get_worker_info() returns None).
WorkerInfo *worker_info();

/// Seed of worker `worker_id` in epoch `epoch`: SplitMix64 (Steele et al.,
/// OOPSLA 2014) of base_seed, epoch and worker_id chained, so every
/// (base, epoch, worker) gets a well-separated Philox seed.
uint64_t worker_seed(uint64_t base_seed, uint64_t epoch, int64_t worker_id);

// ---- the loader --------------------------------------------------------------

/// Options of a DataLoader, LibTorch style: `DataLoaderOptions(64).shuffle(true)`.
/// Setters return *this; getters have the same name. Values are validated by
/// the DataLoader constructor.
class DataLoaderOptions {
public:
  /* implicit */ DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}

  /// Examples per batch (default 1; must be > 0).
  DataLoaderOptions &batch_size(int64_t v) { return set(batch_size_, v); }
  int64_t batch_size() const { return batch_size_; }
  /// Reshuffle every epoch (default false). The order of epoch e is
  /// randperm(N, seed * 1000003 + e) (Philox, Fisher-Yates): it depends only
  /// on (seed, e).
  DataLoaderOptions &shuffle(bool v) { return set(shuffle_, v); }
  bool shuffle() const { return shuffle_; }
  /// Base seed of the shuffle and of the worker seeds (default 0).
  DataLoaderOptions &seed(uint64_t v) { return set(seed_, v); }
  uint64_t seed() const { return seed_; }
  /// Drop the last batch when smaller than batch_size (default false).
  DataLoaderOptions &drop_last(bool v) { return set(drop_last_, v); }
  bool drop_last() const { return drop_last_; }
  /// Worker threads loading batches in parallel (default 0: load on the
  /// consumer thread during iteration; must be >= 0). Batch b is loaded by
  /// worker b % num_workers; batches are delivered in order either way.
  DataLoaderOptions &num_workers(int64_t v) { return set(num_workers_, v); }
  int64_t num_workers() const { return num_workers_; }
  /// Batches each worker may load ahead (default 2; must be >= 1): at most
  /// prefetch_factor * num_workers batches are loaded and not yet consumed.
  DataLoaderOptions &prefetch_factor(int64_t v) { return set(prefetch_factor_, v); }
  int64_t prefetch_factor() const { return prefetch_factor_; }
  /// Keep worker threads alive between epochs (default false: they start
  /// with each epoch and are joined when it ends or is abandoned). Requires
  /// num_workers > 0, as in PyTorch.
  DataLoaderOptions &persistent_workers(bool v) { return set(persistent_workers_, v); }
  bool persistent_workers() const { return persistent_workers_; }
  /// Accepted for PyTorch compatibility (default false). A no-op: this build
  /// has CPU tensors only, so there is no host-to-device copy to speed up.
  DataLoaderOptions &pin_memory(bool v) { return set(pin_memory_, v); }
  bool pin_memory() const { return pin_memory_; }
  /// Builds a Batch from examples (default: default_collate; an empty
  /// function means the default too).
  DataLoaderOptions &collate_fn(CollateFn v) { return set(collate_fn_, std::move(v)); }
  const CollateFn &collate_fn() const { return collate_fn_; }

private:
  template <class T, class V> DataLoaderOptions &set(T &field, V &&v) {
    field = std::forward<V>(v);
    return *this;
  }
  int64_t batch_size_;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  bool drop_last_ = false;
  int64_t num_workers_ = 0;
  int64_t prefetch_factor_ = 2;
  bool persistent_workers_ = false;
  bool pin_memory_ = false;
  CollateFn collate_fn_;
};

namespace detail {
struct LoaderState;
struct EpochRun;
}  // namespace detail

/// Mini-batches over a Dataset (torch.utils.data.DataLoader).
///
/// Each `begin()` (each range-for) starts the next epoch: epoch e yields
/// num_batches() batches of the permutation of epoch e (or 0..N-1 without
/// shuffle), collated by collate_fn, in order. Results are identical for every
/// num_workers and prefetch_factor (unless the dataset draws from
/// worker_info()->generator, whose streams are per worker by design).
///
/// Errors: the constructor throws kiln::Error naming the bad value (batch_size
/// <= 0, num_workers < 0, prefetch_factor < 1, persistent_workers without
/// workers, a null or empty dataset). An exception thrown by Dataset::get or
/// collate_fn reaches the consumer when it advances to that batch, as a
/// kiln::Error "DataLoader: batch 3 (worker 1) failed: <what>".
///
/// Threading: one consumer thread drives a loader and its iterators. Workers
/// are std::threads that load into a bounded, index-ordered queue. Abandoning
/// an epoch (break out of a range-for, destroying its iterators, or calling
/// begin() again) discards prefetched batches; destroying the loader joins
/// its workers. Either waits only for the get()/collate calls in flight.
class DataLoader {
public:
  /// An input iterator over the batches of one epoch. Copies share position;
  /// the default-constructed iterator is end(). Advancing an iterator whose
  /// epoch was superseded by a newer begin(), or whose loader was destroyed,
  /// throws kiln::Error.
  class Iterator {
  public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch *;
    using reference = Batch &;

    Iterator() = default;
    /// The current batch (movable-from: the loader keeps no copy).
    Batch &operator*() const;
    Batch *operator->() const { return &**this; }
    /// Loads the next batch (waiting for its worker when needed).
    Iterator &operator++();
    bool operator==(const Iterator &other) const { return run_ == other.run_; }
    bool operator!=(const Iterator &other) const { return run_ != other.run_; }

  private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) {}
    std::shared_ptr<detail::EpochRun> run_;  // null at the end
  };

  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = DataLoaderOptions());
  /// The original minimal loader: a copy of `dataset` with options
  /// batch_size, shuffle, seed, drop_last (0 workers).
  DataLoader(TensorDataset dataset, int64_t batch_size, bool shuffle = true, uint64_t seed = 0,
             bool drop_last = false);
  /// Joins the workers (after their in-flight get()/collate calls return).
  ~DataLoader();
  DataLoader(DataLoader &&) noexcept = default;
  DataLoader &operator=(DataLoader &&) noexcept;
  DataLoader(const DataLoader &) = delete;
  DataLoader &operator=(const DataLoader &) = delete;

  /// Starts the next epoch (abandoning an unfinished one) and returns an
  /// iterator at its first batch, waiting for it to load; end() when the
  /// epoch has no batches. Throws like operator++ when batch 0 fails.
  Iterator begin();
  Iterator end() const { return Iterator(); }

  /// Convenience: all batches of the next epoch as (data, target) pairs.
  /// Advances the epoch like begin().
  std::vector<std::pair<Tensor, Tensor>> epoch();

  /// Batches per epoch: ceil(N / batch_size), or floor with drop_last.
  int64_t num_batches() const;
  /// Epochs started so far; the next begin() loads epoch epochs_started().
  uint64_t epochs_started() const;
  /// Makes the next begin() load epoch `e` (to resume a run, like a sampler's
  /// set_epoch).
  void set_epoch(uint64_t e);

  const DataLoaderOptions &options() const;
  const std::shared_ptr<Dataset> &dataset() const;

private:
  std::shared_ptr<detail::LoaderState> state_;
};

// ---- digits and helpers -----------------------------------------------------

/// Reads the UCI optical digits CSV (gzip or plain): rows of 64 pixel values
/// 0..16 then the label 0..9. Returns features [N, 64] float32 scaled to
/// [0, 1] (divided by 16) and labels [N] int64. Throws kiln::Error naming the
/// file and line on a missing file, a short row, a field that is not a number
/// (trailing characters included) or an out-of-range value, and for a file of
/// more than 64 MiB of text (decompressed).
TensorDataset load_digits(const std::string &path);

/// Rows `indices` (int64 [M]) of `t` ([N, ...]) -> [M, ...]; a copy.
Tensor index_rows(const Tensor &t, const std::vector<int64_t> &indices);

/// A random permutation of [0, n) from Philox (seed) via Fisher-Yates.
std::vector<int64_t> randperm(int64_t n, uint64_t seed);

/// Splits reproducibly: shuffles with `seed`, the last `test_size` rows are
/// the test set. Throws if test_size is not in [1, N-1].
std::pair<TensorDataset, TensorDataset> train_test_split(const TensorDataset &ds, int64_t test_size,
                                                         uint64_t seed);

}  // namespace kiln::data
