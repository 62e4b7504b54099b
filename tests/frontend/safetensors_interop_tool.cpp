// kiln-safetensors-interop: the Kiln half of the round trips with Python's
// `safetensors` package (tests/tools/safetensors_interop.py, issue 17):
//
//   kiln-safetensors-interop write PATH   kiln::save of the tensors below (+ metadata)
//   kiln-safetensors-interop read PATH    kiln::load, then one line per tensor
//                                         and per metadata entry:
//     tensor <name> <DTYPE> <d0,d1,..> <hex of the row-major little-endian bytes>
//     meta <hex of the UTF-8 key> <hex of the UTF-8 value>
//     verified <0|1>
//
// The written values are given here as float32/int64/bool literals and
// converted by Kiln (to(kFloat16), to(kBFloat16)); the Python side computes
// the expected bytes itself (numpy's float16 cast, its own bf16 rounding).
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

const char *st_dtype_name(DType t) {
  switch (t) {
  case kFloat32: return "F32";
  case kFloat16: return "F16";
  case kBFloat16: return "BF16";
  case kInt64: return "I64";
  case kBool: return "BOOL";
  case kFloat64: return "F64";
  case kInt32: return "I32";
  }
  return "?";
}

std::string hex(const void *data, size_t n) {
  static const char *digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<const unsigned char *>(data)[i];
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out.empty() ? "-" : out;
}

/// The float values of the floating tensors: signed zeros, a subnormal,
/// values that round differently in f16 and bf16, infinities, a NaN.
std::vector<float> float_values() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f, -0.0f, 1.0f, -2.5f, 3.14159265f, 1e-40f, 65504.0f, -1.0009765625f, 1.00390625f, 1.01171875f,
          inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-5f, 123456.789f, -7.0e-3f};
}

int write(const std::string &path) {
  const std::vector<float> f = float_values();
  Tensor f32 = tensor(f, {4, 4});
  Tensor bools = tensor(std::vector<float>{1, 0, 1, 1, 0, 0}, {2, 3}).to(kBool);
  NamedTensors tensors = {
      {"weight.f32", f32},
      {"weight.f16", f32.to(kFloat16)},
      {"weight.bf16", f32.to(kBFloat16)},
      {"ids.i64", tensor(std::vector<int64_t>{-4611686018427387904LL, -1, 0, 9007199254740993LL, 42}, {5})},
      {"mask.bool", bools},
      {"scalar.f32", tensor(std::vector<float>{3.25f}, {})},
      {"transposed.f32",
       tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1)}, // a view: written row-major
      {"empty.f32", zeros({0, 3})},
  };
  save(path, tensors,
       {{"format", "pt"}, {"producer", "kiln"}, {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"},
        {"json", "{\"epoch\": 3, \"lr\": [0.001, 0.0001]}"}, {"empty", ""}});
  return 0;
}

int read(const std::string &path) {
  LoadedTensors loaded = load(path);
  for (const auto &[name, t] : loaded.tensors) {
    Tensor c = t.contiguous();
    std::string shape;
    for (int64_t d = 0; d < c.dim(); ++d) shape += (d ? "," : "") + std::to_string(c.size(d));
    std::printf("tensor %s %s %s %s\n", name.c_str(), st_dtype_name(c.dtype()), shape.empty() ? "-" : shape.c_str(),
                hex(c.raw_data(), static_cast<size_t>(c.numel()) * itemsize(c.dtype())).c_str());
  }
  for (const auto &[key, value] : loaded.metadata)
    std::printf("meta %s %s\n", hex(key.data(), key.size()).c_str(), hex(value.data(), value.size()).c_str());
  std::printf("verified %d\n", loaded.verified ? 1 : 0);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3 || (std::strcmp(argv[1], "write") && std::strcmp(argv[1], "read"))) {
    std::fprintf(stderr, "usage: kiln-safetensors-interop write|read PATH\n");
    return 2;
  }
  try {
    return !std::strcmp(argv[1], "write") ? write(argv[2]) : read(argv[2]);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-safetensors-interop: %s\n", e.what());
    return 1;
  }
}
