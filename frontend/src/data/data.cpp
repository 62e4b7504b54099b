// Digits CSV loading (zlib), splits and mini-batches.
#include <cstring>
#include <numeric>
#include <sstream>

#include <zlib.h>

#include "kiln/data.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln::data {

/// Whole file contents, transparently gunzipped (gzread reads plain files too).
static std::string read_maybe_gz(const std::string &path) {
  gzFile f = gzopen(path.c_str(), "rb");
  KILN_CHECK(f != nullptr, "load_digits: cannot open '", path, "': ", std::strerror(errno),
             ". Run from the repository root or pass the path to data/digits.csv.gz");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char *msg = gzerror(f, &err);
  std::string error = (n < 0 || (err != Z_OK && err != Z_STREAM_END)) ? std::string(msg) : std::string();
  gzclose(f);
  KILN_CHECK(error.empty(), "load_digits: '", path, "' is corrupt or truncated (", error, ")");
  return out;
}

TensorDataset load_digits(const std::string &path) {
  const std::string text = read_maybe_gz(path);
  std::vector<float> features;
  std::vector<int64_t> labels;
  std::istringstream lines(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    std::vector<double> row;
    std::istringstream fields(line);
    std::string field;
    while (std::getline(fields, field, ',')) {
      char *end = nullptr;
      double v = std::strtod(field.c_str(), &end);
      KILN_CHECK(end != field.c_str(), "load_digits: ", path, ":", line_no, ": '", field, "' is not a number");
      row.push_back(v);
    }
    KILN_CHECK(row.size() == 65, "load_digits: ", path, ":", line_no, ": expected 65 values (64 pixels + label), got ",
               row.size());
    for (int i = 0; i < 64; ++i) {
      KILN_CHECK(row[i] >= 0 && row[i] <= 16, "load_digits: ", path, ":", line_no, ": pixel ", i, " = ", row[i],
                 " outside 0..16");
      features.push_back(static_cast<float>(row[i] / 16.0));
    }
    KILN_CHECK(row[64] >= 0 && row[64] <= 9 && row[64] == static_cast<int64_t>(row[64]), "load_digits: ", path, ":",
               line_no, ": label ", row[64], " is not a digit 0..9");
    labels.push_back(static_cast<int64_t>(row[64]));
  }
  KILN_CHECK(!labels.empty(), "load_digits: '", path, "' holds no rows");
  const int64_t n = static_cast<int64_t>(labels.size());
  return TensorDataset{tensor(features, {n, 64}), tensor(labels, {n})};
}

Tensor index_rows(const Tensor &t, const std::vector<int64_t> &indices) {
  KILN_CHECK(t.defined() && t.dim() >= 1, "index_rows: expected a tensor with at least one dimension");
  Tensor src = t.contiguous();
  Shape shape = src.sizes();
  const int64_t rows = shape[0];
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::empty(shape, src.dtype());
  const size_t row_bytes = static_cast<size_t>(src.numel() / std::max<int64_t>(rows, 1)) * itemsize(src.dtype());
  const char *s = static_cast<const char *>(src.raw_data());
  char *d = static_cast<char *>(out.raw_data());
  for (size_t i = 0; i < indices.size(); ++i) {
    KILN_CHECK(indices[i] >= 0 && indices[i] < rows, "index_rows: index ", indices[i], " out of range for ", rows,
               " rows");
    std::memcpy(d + i * row_bytes, s + indices[i] * row_bytes, row_bytes);
  }
  return out;
}

std::vector<int64_t> randperm(int64_t n, uint64_t seed) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  Generator gen(seed);
  for (int64_t i = n - 1; i > 0; --i) {
    auto r = gen.next4();
    uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    std::swap(perm[i], perm[x % static_cast<uint64_t>(i + 1)]);
  }
  return perm;
}

std::pair<TensorDataset, TensorDataset> train_test_split(const TensorDataset &ds, int64_t test_size, uint64_t seed) {
  const int64_t n = ds.size();
  KILN_CHECK(test_size >= 1 && test_size < n, "train_test_split: test_size ", test_size, " must be in [1, ", n - 1,
             "] for a dataset of ", n, " rows");
  auto perm = randperm(n, seed);
  std::vector<int64_t> train(perm.begin(), perm.end() - test_size), test(perm.end() - test_size, perm.end());
  return {TensorDataset{index_rows(ds.features, train), index_rows(ds.labels, train)},
          TensorDataset{index_rows(ds.features, test), index_rows(ds.labels, test)}};
}

DataLoader::DataLoader(TensorDataset dataset, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last)
    : ds_(std::move(dataset)), batch_size_(batch_size), shuffle_(shuffle), drop_last_(drop_last), seed_(seed) {
  KILN_CHECK(batch_size > 0, "DataLoader: batch_size must be positive, got ", batch_size);
  KILN_CHECK(ds_.size() > 0, "DataLoader: empty dataset");
  KILN_CHECK(ds_.labels.size(0) == ds_.size(), "DataLoader: features have ", ds_.size(), " rows but labels ",
             ds_.labels.size(0));
}

int64_t DataLoader::num_batches() const {
  return drop_last_ ? ds_.size() / batch_size_ : (ds_.size() + batch_size_ - 1) / batch_size_;
}

std::vector<std::pair<Tensor, Tensor>> DataLoader::epoch() {
  std::vector<int64_t> order(static_cast<size_t>(ds_.size()));
  if (shuffle_) order = randperm(ds_.size(), seed_ * 1000003ULL + epoch_);
  else std::iota(order.begin(), order.end(), 0);
  ++epoch_;
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int64_t b = 0; b < num_batches(); ++b) {
    int64_t start = b * batch_size_, end = std::min(start + batch_size_, ds_.size());
    std::vector<int64_t> idx(order.begin() + start, order.begin() + end);
    batches.emplace_back(index_rows(ds_.features, idx), index_rows(ds_.labels, idx));
  }
  return batches;
}

}  // namespace kiln::data
