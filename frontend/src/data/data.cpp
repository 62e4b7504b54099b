// Digits CSV loading (zlib), splits, TensorDataset and LambdaDataset.
// Collation is in collate.cpp, the loader and its workers in dataloader.cpp.
#include <cstring>
#include <numeric>
#include <sstream>

#include <zlib.h>

#include "kiln/data.h"
#include "kiln/ops.h"
#include "kiln/random.h"

namespace kiln::data {

/// Row `index` of `t` ([N, ...] -> [...]) as a view sharing storage, built
/// directly (no op, so nothing is traced and no autograd history is kept):
/// safe to call from loader worker threads.
static Tensor row_view(const Tensor &t, int64_t index) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->sizes.assign(t.sizes().begin() + 1, t.sizes().end());
  impl->strides.assign(t.strides().begin() + 1, t.strides().end());
  impl->offset = t.storage_offset() + index * t.stride(0);
  impl->dtype = t.dtype();
  impl->device = t.device();
  return Tensor(std::move(impl));
}

TensorDataset::TensorDataset(Tensor features_, Tensor labels_)
    : features(std::move(features_)), labels(std::move(labels_)) {
  check("TensorDataset");
}

void TensorDataset::check(const char *op) const {
  KILN_CHECK(!features.defined() || features.dim() >= 1, op, ": features must have at least one dimension, got shape ",
             shape_str(features.sizes()));
  KILN_CHECK(!labels.defined() || labels.dim() >= 1, op, ": labels must have at least one dimension, got shape ",
             shape_str(labels.sizes()));
  KILN_CHECK(!labels.defined() || labels.size(0) == size(), op, ": features have ", size(), " rows but labels ",
             labels.size(0));
}

Example TensorDataset::get(int64_t index) {
  KILN_CHECK(index >= 0 && index < size(), "TensorDataset::get: index ", index, " out of range for ", size(),
             " rows");
  return Example{row_view(features, index), labels.defined() ? row_view(labels, index) : Tensor()};
}

LambdaDataset::LambdaDataset(int64_t size, GetFn fn) : size_(size), fn_(std::move(fn)) {
  KILN_CHECK(size >= 0, "LambdaDataset: size must be >= 0, got ", size);
  KILN_CHECK(static_cast<bool>(fn_), "LambdaDataset: the get function is empty");
}

Example LambdaDataset::get(int64_t index) {
  KILN_CHECK(index >= 0 && index < size_, "LambdaDataset::get: index ", index, " out of range for size ", size_);
  return fn_(index);
}

std::shared_ptr<Dataset> make_dataset(int64_t size, LambdaDataset::GetFn fn) {
  return std::make_shared<LambdaDataset>(size, std::move(fn));
}

/// The most text load_digits reads: the UCI file is 0.5 MB, so anything past
/// this is another file or a decompression bomb (a few KB of gzip can expand
/// to gigabytes).
constexpr size_t kMaxDigitsTextBytes = size_t(64) << 20;

/// Whole file contents, transparently gunzipped (gzread reads plain files too).
static std::string read_maybe_gz(const std::string &path) {
  gzFile f = gzopen(path.c_str(), "rb");
  KILN_CHECK(f != nullptr, "load_digits: cannot open '", path, "': ", std::strerror(errno),
             ". Run from the repository root or pass the path to data/digits.csv.gz");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxDigitsTextBytes) {
      gzclose(f);
      throw Error("load_digits: '" + path + "' holds more than " + std::to_string(kMaxDigitsTextBytes >> 20) +
                  " MiB of text (the digits CSV is about 0.5 MB); pass the path to data/digits.csv.gz");
    }
  }
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
      while (*end == ' ' || *end == '\r') ++end;
      KILN_CHECK(end != field.c_str() && *end == '\0', "load_digits: ", path, ":", line_no, ": '", field,
                 "' is not a number");
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

}  // namespace kiln::data
