// Datasets, collation and the DataLoader: determinism across worker counts,
// drop_last, padding, worker errors, early exit, worker seeds, bad options.
// No timing assertions: a hang would show up as the test timing out.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <stdlib.h>

#include <zlib.h>

#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace kiln {
namespace {

using data::Batch;
using data::DataLoader;
using data::DataLoaderOptions;
using data::Example;

std::vector<double> v(const Tensor &t) { return t.to_vector<double>(); }
/// Exact int64 values (to_vector goes through double).
std::vector<int64_t> ints(const Tensor &t) {
  Tensor c = t.contiguous();
  const int64_t *p = c.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}
std::string digits_path() { return std::string(KILN_SOURCE_DIR) + "/data/digits.csv.gz"; }

/// Message of the kiln::Error thrown by `f` ("" if none).
template <class F> std::string error_of(F &&f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

/// n samples: data float32 [2] = {i, 10 i}, target int64 0-d = i % 3.
std::shared_ptr<data::Dataset> counting(int64_t n) {
  return data::make_dataset(n, [](int64_t i) {
    return Example{tensor({static_cast<float>(i), static_cast<float>(10 * i)}, {2}),
                   tensor(std::vector<int64_t>{i % 3}, {})};
  });
}

/// Everything a batch holds, flattened, for comparisons.
struct Seen {
  std::vector<double> data, target;
  std::vector<int64_t> indices;
  bool operator==(const Seen &o) const { return data == o.data && target == o.target && indices == o.indices; }
};

std::vector<Seen> run_epochs(DataLoader &loader, int epochs) {
  std::vector<Seen> out;
  for (int e = 0; e < epochs; ++e)
    for (Batch &b : loader) out.push_back({v(b.data), v(b.target), b.indices});
  return out;
}

// ---- the digits data and the original loader (moved from nn_test.cpp) ---------

TEST(DatasetDigits, LoadWithExpectedShapeAndRange) {
  auto ds = data::load_digits(digits_path());
  EXPECT_EQ(ds.features.sizes(), (Shape{1797, 64}));
  EXPECT_EQ(ds.labels.sizes(), (Shape{1797}));
  EXPECT_EQ(ds.features.amax().item(), 1.0);
  EXPECT_EQ(ds.labels.to(kFloat32).amax().item(), 9.0);
  EXPECT_EQ(ds.labels.to_vector<int64_t>()[0], 0);  // first row of the UCI file
}

// Edge cases from the digits fuzzer's corpus (tests/fuzz/corpus/digits).
TEST(DatasetDigits, RejectsTrailingGarbageAndDecompressionBombs) {
  char dir_template[] = "/tmp/kiln-digits-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string row = "0,0,5,13,9,1,0,0,0,0,13,15,10,15,5,0,0,3,15,2,0,11,8,0,0,4,12,0,0,8,8,0,0,5,8,0,0,9,8,"
                          "0,0,4,11,0,1,12,7,0,0,2,14,5,10,12,0,0,0,0,6,13,10,0,0,0,";
  auto error_of = [](const std::string &path) -> std::string {
    try {
      data::load_digits(path);
    } catch (const Error &e) {
      return e.what();
    }
    return "";
  };
  std::ofstream(dir + "/ok.csv") << row << "7\r\n";
  EXPECT_EQ(data::load_digits(dir + "/ok.csv").labels.to_vector<int64_t>(), std::vector<int64_t>{7});
  std::ofstream(dir + "/garbage.csv") << row << "7x\n"; // strtod alone reads 7
  EXPECT_NE(error_of(dir + "/garbage.csv").find(":1: '7x' is not a number"), std::string::npos);
  {
    // 65 MiB of text, a few hundred KB of gzip.
    gzFile f = gzopen((dir + "/bomb.csv.gz").c_str(), "wb9");
    const std::string chunk(1 << 20, '0');
    for (int i = 0; i < 65; ++i)
      gzwrite(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    gzclose(f);
  }
  EXPECT_NE(error_of(dir + "/bomb.csv.gz").find("more than 64 MiB of text"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(DatasetDigits, SplitIsReproducibleFromSeed) {
  auto ds = data::load_digits(digits_path());
  auto [train1, test1] = data::train_test_split(ds, 360, 42);
  auto [train2, test2] = data::train_test_split(ds, 360, 42);
  auto [train3, test3] = data::train_test_split(ds, 360, 43);
  EXPECT_EQ(train1.size(), 1437);
  EXPECT_EQ(test1.size(), 360);
  EXPECT_EQ(v(test1.labels), v(test2.labels));
  EXPECT_NE(v(test1.features), v(test3.features));
}

TEST(DataLoaderLegacy, CoversEveryRowOncePerEpoch) {
  data::TensorDataset ds{arange(10).to(kFloat32).unsqueeze(1), arange(10)};
  DataLoader loader(ds, 4, /*shuffle=*/true, /*seed=*/1);
  EXPECT_EQ(loader.num_batches(), 3);
  auto epoch1 = loader.epoch();
  std::vector<int64_t> seen;
  for (auto &[x, y] : epoch1) {
    EXPECT_EQ(x.dim(), 2);
    for (int64_t l : y.to_vector<int64_t>()) seen.push_back(l);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  auto epoch2 = loader.epoch();
  EXPECT_NE(v(epoch1[0].second), v(epoch2[0].second));  // reshuffled
  // The same batches as the original loader: rows of randperm(N, seed * 1000003 + epoch).
  auto order = data::randperm(10, 1 * 1000003ULL + 1);
  EXPECT_EQ(v(epoch2[2].first), v(data::index_rows(ds.features, {order[8], order[9]})));
}

TEST(DataLoaderLegacy, EpochMatchesRangeForOfTheSameOptions) {
  data::TensorDataset ds{arange(11).to(kFloat32).unsqueeze(1), arange(11)};
  DataLoader legacy(ds, 3, /*shuffle=*/true, /*seed=*/9);
  DataLoader loader(std::make_shared<data::TensorDataset>(ds), DataLoaderOptions(3).shuffle(true).seed(9));
  for (int e = 0; e < 2; ++e) {
    auto pairs = legacy.epoch();
    size_t i = 0;
    for (Batch &b : loader) {
      ASSERT_LT(i, pairs.size());
      EXPECT_EQ(v(pairs[i].first), v(b.data));
      EXPECT_EQ(v(pairs[i].second), v(b.target));
      ++i;
    }
    EXPECT_EQ(i, pairs.size());
  }
}

// ---- datasets -------------------------------------------------------------------

TEST(DatasetTensor, GetReturnsRowsAndChecksIndex) {
  data::TensorDataset ds(arange(6).to(kFloat32).view({3, 2}), arange(3));
  Example e = ds.get(1);
  EXPECT_EQ(e.data.sizes(), (Shape{2}));
  EXPECT_EQ(v(e.data), (std::vector<double>{2, 3}));
  EXPECT_EQ(e.target.dim(), 0);
  EXPECT_EQ(e.target.item(), 1.0);
  EXPECT_FALSE(e.data.requires_grad());
  std::string msg = error_of([&] { ds.get(3); });
  EXPECT_NE(msg.find("index 3"), std::string::npos) << msg;
  msg = error_of([] { data::TensorDataset bad(zeros({4, 2}), zeros({3}, kInt64)); });
  EXPECT_NE(msg.find("4 rows but labels 3"), std::string::npos) << msg;
}

TEST(DatasetLambda, WrapsAFunction) {
  auto ds = counting(5);
  EXPECT_EQ(ds->size(), 5);
  EXPECT_EQ(v(ds->get(4).data), (std::vector<double>{4, 40}));
  EXPECT_NE(error_of([&] { ds->get(5); }).find("index 5"), std::string::npos);
  EXPECT_NE(error_of([] { data::make_dataset(-2, [](int64_t) { return Example{}; }); }).find("-2"),
            std::string::npos);
}

// ---- collation ------------------------------------------------------------------

TEST(DataLoaderCollate, DefaultStacksStridedExamples) {
  Tensor m = arange(6).to(kFloat32).view({2, 3});
  std::vector<Example> ex{{m.t(), scalar_tensor(1, kInt64)}, {m.t() * 2.0, scalar_tensor(2, kInt64)}};
  Batch b = data::default_collate(ex);
  EXPECT_EQ(b.data.sizes(), (Shape{2, 3, 2}));
  EXPECT_TRUE(b.data.is_contiguous());
  EXPECT_EQ(v(b.data), (std::vector<double>{0, 3, 1, 4, 2, 5, 0, 6, 2, 8, 4, 10}));
  EXPECT_EQ(b.target.dtype(), kInt64);
  EXPECT_EQ(v(b.target), (std::vector<double>{1, 2}));
  EXPECT_FALSE(b.lengths.defined());
}

TEST(DataLoaderCollate, DefaultRejectsMismatchesNamingTheExample) {
  std::vector<Example> ex{{zeros({3}), Tensor()}, {zeros({4}), Tensor()}};
  std::string msg = error_of([&] { data::default_collate(ex); });
  EXPECT_NE(msg.find("example 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pad_collate"), std::string::npos) << msg;
  ex = {{zeros({3}), Tensor()}, {zeros({3}, kInt64), Tensor()}};
  msg = error_of([&] { data::default_collate(ex); });
  EXPECT_NE(msg.find("int64"), std::string::npos) << msg;
  ex = {{zeros({3}), Tensor()}, {zeros({3}), scalar_tensor(1)}};
  msg = error_of([&] { data::default_collate(ex); });
  EXPECT_NE(msg.find("target"), std::string::npos) << msg;
}

TEST(DataLoaderCollate, PadCollatePadsToTheLongestAndReturnsLengths) {
  auto seq = [](int64_t len, float base) {
    std::vector<float> x;
    for (int64_t i = 0; i < len * 2; ++i) x.push_back(base + static_cast<float>(i));
    return tensor(x, {len, 2});
  };
  std::vector<Example> ex{{seq(2, 0), tensor(std::vector<int64_t>{1, 2}, {2})},
                          {seq(3, 100), tensor(std::vector<int64_t>{3, 4, 5}, {3})},
                          {seq(1, 200), tensor(std::vector<int64_t>{6}, {1})}};
  Batch b = data::pad_collate(-1.0, -100.0)(ex);
  EXPECT_EQ(b.data.sizes(), (Shape{3, 3, 2}));
  EXPECT_EQ(v(b.data), (std::vector<double>{0, 1, 2, 3, -1, -1,             //
                                            100, 101, 102, 103, 104, 105,   //
                                            200, 201, -1, -1, -1, -1}));
  EXPECT_EQ(b.lengths.dtype(), kInt64);
  EXPECT_EQ(b.lengths.to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(b.target.dtype(), kInt64);
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, -100, 3, 4, 5, 6, -100, -100}));

  std::vector<Example> bad{{seq(2, 0), Tensor()}, {zeros({2, 3}), Tensor()}};
  std::string msg = error_of([&] { data::pad_collate()(bad); });
  EXPECT_NE(msg.find("example 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("only dim 0 may differ"), std::string::npos) << msg;
}

TEST(DataLoaderCollate, PadCollateThroughAWorkerLoader) {
  auto ds = data::make_dataset(7, [](int64_t i) {  // data [i+1] = i+1 ones
    return Example{ones({i + 1}), scalar_tensor(static_cast<double>(i), kInt64)};
  });
  DataLoader loader(ds, DataLoaderOptions(3).collate_fn(data::pad_collate(0.0)).num_workers(2));
  std::vector<int64_t> lengths;
  for (Batch &b : loader) {
    EXPECT_EQ(b.data.size(1), b.lengths.to_vector<int64_t>().back());  // no shuffle: last is longest
    EXPECT_EQ(b.data.sum().item(), b.lengths.to(kFloat32).sum().item());
    for (int64_t l : b.lengths.to_vector<int64_t>()) lengths.push_back(l);
  }
  EXPECT_EQ(lengths, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
}

// ---- loader behaviour -------------------------------------------------------------

TEST(DataLoaderBasics, DropLast) {
  auto ds = counting(10);
  DataLoader keep(ds, DataLoaderOptions(4));
  DataLoader drop(ds, DataLoaderOptions(4).drop_last(true).num_workers(2));
  EXPECT_EQ(keep.num_batches(), 3);
  EXPECT_EQ(drop.num_batches(), 2);
  std::vector<int64_t> keep_sizes, drop_sizes;
  for (Batch &b : keep) keep_sizes.push_back(b.size());
  for (Batch &b : drop) drop_sizes.push_back(b.size());
  EXPECT_EQ(keep_sizes, (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(drop_sizes, (std::vector<int64_t>{4, 4}));
  // A batch larger than the dataset with drop_last: an empty epoch.
  DataLoader none(ds, DataLoaderOptions(11).drop_last(true));
  EXPECT_TRUE(none.begin() == none.end());
}

TEST(DataLoaderBasics, ShuffleDependsOnlyOnSeedAndEpoch) {
  auto ds = counting(23);
  DataLoader a(ds, DataLoaderOptions(5).shuffle(true).seed(4));
  DataLoader b(ds, DataLoaderOptions(5).shuffle(true).seed(4));
  DataLoader c(ds, DataLoaderOptions(5).shuffle(true).seed(5));
  auto a_runs = run_epochs(a, 3);
  b.set_epoch(2);  // resume directly at epoch 2
  auto b_epoch2 = run_epochs(b, 1);
  EXPECT_EQ(a.epochs_started(), 3u);
  ASSERT_EQ(b_epoch2.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(a_runs[10 + i] == b_epoch2[i]);
  EXPECT_FALSE(a_runs[0] == a_runs[5]);                 // reshuffled between epochs
  EXPECT_FALSE(a_runs[0] == run_epochs(c, 1)[0]);       // another seed, another order
  DataLoader plain(ds, DataLoaderOptions(5));
  EXPECT_EQ(run_epochs(plain, 1)[0].indices, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(DataLoaderWorkers, SameBatchesAsTheMainThread) {
  auto ds = counting(37);
  auto opts = DataLoaderOptions(4).shuffle(true).seed(11);
  DataLoader main_thread(ds, opts);
  DataLoader two(ds, DataLoaderOptions(opts).num_workers(2).pin_memory(true));
  DataLoader persistent(ds, DataLoaderOptions(opts).num_workers(2).persistent_workers(true).prefetch_factor(1));
  DataLoader three(ds, DataLoaderOptions(opts).num_workers(3).prefetch_factor(4));
  auto expected = run_epochs(main_thread, 3);
  ASSERT_EQ(expected.size(), 30u);
  EXPECT_TRUE(run_epochs(two, 3) == expected);
  EXPECT_TRUE(run_epochs(persistent, 3) == expected);
  EXPECT_TRUE(run_epochs(three, 3) == expected);
  std::vector<int64_t> all;
  for (size_t i = 0; i < 10; ++i) all.insert(all.end(), expected[i].indices.begin(), expected[i].indices.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 37; ++i) EXPECT_EQ(all[static_cast<size_t>(i)], i);
}

TEST(DataLoaderWorkers, ExceptionSurfacesAsErrorNamingTheBatch) {
  auto ds = data::make_dataset(20, [](int64_t i) -> Example {
    if (i == 13) throw std::runtime_error("corrupt sample 13");
    return Example{scalar_tensor(static_cast<double>(i)), Tensor()};
  });
  for (int64_t workers : {0, 2}) {
    DataLoader loader(ds, DataLoaderOptions(4).num_workers(workers));
    for (int attempt = 0; attempt < 2; ++attempt) {  // the loader stays usable
      int64_t batches = 0;
      std::string msg = error_of([&] {
        for (Batch &b : loader) {
          EXPECT_EQ(b.target.defined(), false);
          ++batches;
        }
      });
      EXPECT_EQ(batches, 3) << "workers " << workers;
      EXPECT_NE(msg.find("batch 3"), std::string::npos) << msg;
      EXPECT_NE(msg.find("corrupt sample 13"), std::string::npos) << msg;
      if (workers > 0) EXPECT_NE(msg.find("worker 1"), std::string::npos) << msg;
    }
  }
  auto odd = data::make_dataset(4, [](int64_t i) -> Example {
    if (i == 2) throw 42;
    return Example{scalar_tensor(1), scalar_tensor(0)};
  });
  DataLoader loader(odd, DataLoaderOptions(1).num_workers(2));
  EXPECT_NE(error_of([&] { run_epochs(loader, 1); }).find("batch 2"), std::string::npos);
}

TEST(DataLoaderWorkers, EarlyBreakAndDestructionDoNotHang) {
  std::atomic<int64_t> gets{0};
  auto ds = data::make_dataset(100000, [&gets](int64_t i) {
    ++gets;
    return Example{scalar_tensor(static_cast<double>(i)), Tensor()};
  });
  for (bool persistent : {false, true}) {
    auto opts = DataLoaderOptions(2).num_workers(2).persistent_workers(persistent).shuffle(true).seed(3);
    DataLoader reference(ds, DataLoaderOptions(opts).num_workers(1).persistent_workers(false));
    {
      DataLoader loader(ds, opts);
      for (Batch &b : loader) {
        EXPECT_EQ(b.size(), 2);
        break;  // abandons epoch 0 with batches prefetched
      }
      auto it = loader.begin();  // epoch 1 after the early break
      reference.set_epoch(1);
      auto ref = reference.begin();
      for (int k = 0; k < 3; ++k, ++it, ++ref) EXPECT_EQ(it->indices, ref->indices);
      auto stale = it;
      loader.begin();  // abandons epoch 1; the old iterator now throws
      EXPECT_NE(error_of([&] { ++stale; }).find("abandoned"), std::string::npos);
    }  // destroyed mid-epoch 2
  }
  // The window bounds the prefetch: far fewer gets than the 100000 samples.
  EXPECT_LT(gets.load(), 1000);

  // A loader destroyed while an iterator is alive: the iterator throws.
  auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions(1).num_workers(2));
  auto it = loader->begin();
  loader.reset();
  EXPECT_NE(error_of([&] { ++it; }).find("destroyed"), std::string::npos);
}

TEST(DataLoaderWorkers, PerWorkerSeedsAreDeterministic) {
  // Each sample reports (worker id, epoch, seed, a draw from the worker's generator).
  auto ds = data::make_dataset(12, [](int64_t) {
    data::WorkerInfo *info = data::worker_info();
    if (!info) return Example{tensor(std::vector<int64_t>{-1, -1, -1, -1}, {4}), Tensor()};
    auto r = info->generator.next4();
    return Example{tensor(std::vector<int64_t>{info->id, static_cast<int64_t>(info->epoch),
                                               static_cast<int64_t>(info->seed), static_cast<int64_t>(r[0])},
                          {4}),
                   Tensor()};
  });
  auto opts = DataLoaderOptions(3).num_workers(2).seed(77).shuffle(true);
  auto collect = [&](DataLoaderOptions o) {
    DataLoader loader(ds, o);
    std::vector<std::vector<int64_t>> rows;
    for (int e = 0; e < 2; ++e)
      for (Batch &b : loader) rows.push_back(ints(b.data));
    return rows;
  };
  auto first = collect(opts);
  EXPECT_EQ(first, collect(opts));                                    // reproducible
  EXPECT_EQ(first, collect(DataLoaderOptions(opts).persistent_workers(true)));
  EXPECT_NE(first, collect(DataLoaderOptions(opts).seed(78)));        // depends on the base seed
  ASSERT_EQ(first.size(), 8u);  // 2 epochs x 4 batches
  for (size_t k = 0; k < first.size(); ++k) {
    const int64_t batch = static_cast<int64_t>(k % 4), epoch = static_cast<int64_t>(k / 4);
    const int64_t worker = batch % 2;
    for (size_t s = 0; s < 3; ++s) {  // 3 samples of [id, epoch, seed, draw]
      EXPECT_EQ(first[k][4 * s], worker);
      EXPECT_EQ(first[k][4 * s + 1], epoch);
      EXPECT_EQ(static_cast<uint64_t>(first[k][4 * s + 2]), data::worker_seed(77, epoch, worker));
    }
  }
  EXPECT_NE(data::worker_seed(77, 0, 0), data::worker_seed(77, 0, 1));
  EXPECT_NE(data::worker_seed(77, 0, 0), data::worker_seed(77, 1, 0));
  EXPECT_NE(data::worker_seed(77, 0, 0), data::worker_seed(78, 0, 0));
  // No worker: worker_info() is null (as get_worker_info() is None).
  EXPECT_EQ(data::worker_info(), nullptr);
  EXPECT_EQ(collect(DataLoaderOptions(opts).num_workers(0))[0][0], -1);
}

TEST(DataLoaderErrors, BadOptionsNameTheValue) {
  auto ds = counting(4);
  struct Case {
    std::function<void()> make;
    std::vector<std::string> expect;
  };
  std::vector<Case> cases{
      {[&] { DataLoader(ds, DataLoaderOptions(0)); }, {"batch_size", "got 0"}},
      {[&] { DataLoader(ds, DataLoaderOptions(2).num_workers(-1)); }, {"num_workers", "got -1"}},
      {[&] { DataLoader(ds, DataLoaderOptions(2).prefetch_factor(0)); }, {"prefetch_factor", "got 0"}},
      {[&] { DataLoader(ds, DataLoaderOptions(2).persistent_workers(true)); }, {"persistent_workers", "0"}},
      {[&] { DataLoader(data::make_dataset(0, [](int64_t) { return Example{}; })); }, {"empty", "size 0"}},
      {[&] { DataLoader(data::TensorDataset{}, 2); }, {"empty", "size 0"}},
      {[&] { DataLoader(std::shared_ptr<data::Dataset>()); }, {"null"}},
  };
  for (auto &c : cases) {
    std::string msg = error_of(c.make);
    ASSERT_FALSE(msg.empty()) << "expected a kiln::Error containing " << c.expect[0];
    EXPECT_NE(msg.find("DataLoader"), std::string::npos) << msg;
    for (auto &s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kiln
