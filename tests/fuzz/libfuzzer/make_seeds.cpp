// kiln-fuzz-seeds: writes the seed corpora of tests/fuzz/corpus (small valid
// files from Kiln's own writers plus hand-made edge cases). The corpus is
// checked in; rerun this only to regenerate it after a format change:
//
//   ninja -C build kiln-fuzz-seeds && build/tests/fuzz/libfuzzer/kiln-fuzz-seeds tests/fuzz/corpus
//
// Files found by fuzzing (crash-*, named after the bug) live beside these
// and are not written here.
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include "kiln/export.h"
#include "kiln/kiln.h"
#include "kiln/lr_scheduler.h"
#include "kiln/serialize.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/SHA256.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;

fs::path g_root;

void write(const std::string &target, const std::string &name, const std::string &bytes) {
  fs::create_directories(g_root / target);
  std::ofstream out(g_root / target / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string le64(uint64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

/// A safetensors file from a header text and data bytes (no Kiln entry).
std::string raw_file(std::string header, const std::string &data) {
  while (header.size() % 8)
    header.push_back(' ');
  return le64(header.size()) + header + data;
}

/// `file` with its "kiln" checksum entry removed: what another writer would
/// produce, so load() does not verify it and mutations get past the CRCs.
std::string strip_kiln_entry(const std::string &file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[i]);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(file.substr(8, n));
  header["__metadata__"].erase("kiln");
  return raw_file(header.dump(), file.substr(8 + n));
}

/// Saves with kiln::save / save_checkpoint into a temp file and returns the bytes.
template <class F> std::string saved_bytes(F save_to) {
  const fs::path tmp = fs::temp_directory_path() / ("kiln-fuzz-seed-" + std::to_string(::getpid()) + ".safetensors");
  save_to(tmp.string());
  std::string bytes = read(tmp);
  fs::remove(tmp);
  return bytes;
}

void safetensors_seeds() {
  const std::string all = saved_bytes([](const std::string &path) {
    save(path,
         {{"f32", tensor({1, 2, 3, 4, 5, 6}, {2, 3})},
          {"f32_view", tensor({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1)},
          {"f64", ones({2}, kFloat64)},
          {"f16", ones({3}, kFloat16)},
          {"bf16", ones({1, 2}, kBFloat16)},
          {"i64", arange(3)},
          {"i32", arange(2, kInt32)},
          {"bool", ones({2}, kBool)},
          {"scalar", ones({}, kFloat32)}},
         {{"format", "pt"}});
  });
  write("safetensors", "valid-every-dtype.safetensors", all);
  write("safetensors", "valid-every-dtype-unverified.safetensors", strip_kiln_entry(all));
  write("safetensors", "valid-no-tensors.safetensors", saved_bytes([](const std::string &p) { save(p, {}); }));
  write("safetensors", "valid-zero-size.safetensors",
        saved_bytes([](const std::string &p) { save(p, {{"empty", ones({0, 3})}}); }));
  write("safetensors", "truncated.safetensors", all.substr(0, all.size() - 5));
  write("safetensors", "header-length-2e60.safetensors", le64(uint64_t(1) << 60) + "{}      ");
  write("safetensors", "shape-2e60-elements.safetensors",
        raw_file(R"({"a":{"dtype":"F32","shape":[1152921504606846976],"data_offsets":[0,4611686018427387904]}})", ""));
  write("safetensors", "shape-overflow.safetensors",
        raw_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", ""));
  write("safetensors", "offsets-past-eof.safetensors",
        raw_file(R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0')));
  write("safetensors", "bool-byte-2.safetensors",
        raw_file(R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", std::string("\x01\x02", 2)));
  write("safetensors", "deep-nesting-100.safetensors",
        raw_file("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}", ""));
  write("safetensors", "metadata-not-string.safetensors",
        raw_file(R"({"__metadata__":{"k":[1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x"));
}

void checkpoint_seeds() {
  nn::Linear model(2, 2);
  optim::Adam adam(model.parameters(), optim::AdamOptions(0.01));
  optim::lr_scheduler::StepLR step_lr(adam, 2, 0.5);
  model(ones({1, 2})).sum().backward();
  adam.step();
  step_lr.step();
  const std::string a = saved_bytes([&](const std::string &p) {
    save_checkpoint(p, model, &adam, &step_lr, /*epoch=*/1, /*step=*/1, R"({"note":"seed"})");
  });
  write("checkpoint", "adam-steplr.safetensors", a);
  write("checkpoint", "adam-steplr-unverified.safetensors", strip_kiln_entry(a));

  optim::SGD sgd(model.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  optim::lr_scheduler::ReduceLROnPlateau plateau(sgd);
  model.zero_grad();
  model(ones({1, 2})).sum().backward();
  sgd.step();
  plateau.step(0.5);
  const std::string s = saved_bytes(
      [&](const std::string &p) { save_checkpoint(p, model, &sgd, &plateau, /*epoch=*/3, /*step=*/7); });
  write("checkpoint", "sgd-plateau.safetensors", s);
  write("checkpoint", "sgd-plateau-unverified.safetensors", strip_kiln_entry(s));
  const std::string bare =
      saved_bytes([&](const std::string &p) { save_checkpoint(p, model, nullptr, nullptr, 0, 0); });
  write("checkpoint", "model-only-unverified.safetensors", strip_kiln_entry(bare));
  write("checkpoint", "plain-tensors.safetensors",
        saved_bytes([](const std::string &p) { save(p, {{"model.weight", ones({2, 2})}}); }));
}

const std::string kCacheKey = "5a1f0d6c3b2e4f708192a3b4c5d6e7f80123456789abcdef0123456789abcdef"; // kernel_cache_fuzz.cpp

std::string cache_trailer(const std::string &key, const std::string &object) {
  llvm::SHA256 sha;
  sha.update(key);
  sha.update(llvm::StringRef("\0", 1));
  sha.update(object);
  std::array<uint8_t, 32> hash = sha.final();
  return le64(object.size()) + std::string(reinterpret_cast<const char *>(hash.data()), hash.size()) + "KILNOBJ1";
}

void kernel_cache_seeds() {
  const std::string object = std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(57, '\0');
  write("kernel_cache", "entry-valid", "\x00" + object + cache_trailer(kCacheKey, object));
  write("kernel_cache", "entry-other-key", "\x00" + object + cache_trailer(std::string(64, '0'), object));
  write("kernel_cache", "build-entry", "\x01" + object);
  write("kernel_cache", "build-empty-object", "\x01");
  write("kernel_cache", "trailer-47-bytes", "\x00" + std::string(39, '\0') + "KILNOBJ1");
  std::string huge = cache_trailer(kCacheKey, object);
  huge.replace(0, 8, le64(uint64_t(1) << 60));
  write("kernel_cache", "size-field-2e60", "\x00" + object + huge);
}

/// The lit tests' modules, one per `// -----` case, comment lines dropped.
void dialect_seeds(const fs::path &lit_dir) {
  std::vector<fs::path> files;
  for (const char *sub : {"ir", "passes"})
    for (const auto &e : fs::directory_iterator(lit_dir / sub))
      if (e.path().extension() == ".mlir")
        files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path &f : files) {
    std::istringstream in(read(f));
    std::string line, text;
    int n = 0;
    auto flush = [&] {
      if (text.find_first_not_of(" \n") != std::string::npos)
        write("kiln_dialect", f.parent_path().filename().string() + "-" + f.stem().string() + "-" + std::to_string(n++) + ".mlir", text);
      text.clear();
    };
    while (std::getline(in, line)) {
      const size_t start = line.find_first_not_of(' ');
      if (line.rfind("// -----", 0) == 0)
        flush();
      else if (start == std::string::npos || line.compare(start, 2, "//") != 0)
        text += line + "\n";
    }
    flush();
  }
}

std::string gzip(const std::string &text) {
  const fs::path tmp = fs::temp_directory_path() / ("kiln-fuzz-seed-" + std::to_string(::getpid()) + ".gz");
  gzFile f = gzopen(tmp.c_str(), "wb9");
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  std::string bytes = read(tmp);
  fs::remove(tmp);
  return bytes;
}

void digits_seeds(const fs::path &digits_gz) {
  gzFile f = gzopen(digits_gz.c_str(), "rb");
  char buf[4096];
  const int n = gzread(f, buf, sizeof buf);
  gzclose(f);
  std::string text(buf, static_cast<size_t>(std::max(n, 0)));
  std::string lines;
  std::istringstream in(text);
  std::string line;
  for (int i = 0; i < 3 && std::getline(in, line); ++i)
    lines += line + "\n";
  write("digits", "three-rows.csv", lines);
  write("digits", "three-rows.csv.gz", gzip(lines));
  std::string crlf;
  for (char c : lines)
    crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  write("digits", "three-rows-crlf.csv", crlf + "\r\n");
  const std::string gz = gzip(lines);
  write("digits", "truncated.csv.gz", gz.substr(0, gz.size() / 2));
  write("digits", "label-10.csv", lines.substr(0, lines.find('\n') - 1) + "10\n");
  write("digits", "pixel-17.csv", "17" + lines.substr(lines.find(',')));
  write("digits", "short-row.csv", "1,2,3\n");
  write("digits", "trailing-garbage.csv", lines.substr(0, lines.find('\n')) + "x\n");
  write("digits", "empty.csv", "");
}

} // namespace

/// Exported models (kiln::export_compiled): a Linear(4, 3) and a tiny
/// Linear-ReLU-Linear, as the file on disk (mode byte 0) and with the
/// checksum fixed by the target (mode byte 1), plus truncated and foreign
/// files; the MLP with a dynamic batch (the launch-list template); a
/// Linear-LayerNorm exported for CUDA on the simulator (sections cuda and
/// cudabin: an sm_90 CUBIN, PTX and the source; its load stops at "no CUDA
/// device" in the fuzzer, after the container and CUDA index are parsed).
void artifact_seeds() {
  kiln::manual_seed(0);
  const fs::path tmp = fs::temp_directory_path() / "kiln-artifact-seed.kiln";
  auto linear = std::make_shared<kiln::nn::Linear>(4, 3);
  kiln::export_compiled(linear, {kiln::randn({2, 4})}, tmp.string());
  const std::string one = read(tmp);
  auto mlp = std::make_shared<kiln::nn::Sequential>(std::initializer_list<std::shared_ptr<kiln::nn::Module>>{
      std::make_shared<kiln::nn::Linear>(4, 8), std::make_shared<kiln::nn::ReLU>(), std::make_shared<kiln::nn::Linear>(8, 2)});
  kiln::export_compiled(mlp, {kiln::randn({3, 4})}, tmp.string());
  const std::string two = read(tmp);
  kiln::ExportOptions dynamic;
  dynamic.dynamic_dims[0] = {0};
  kiln::export_compiled(mlp, {kiln::randn({3, 4})}, tmp.string(), dynamic);
  const std::string three = read(tmp);
  auto norm = std::make_shared<kiln::nn::Sequential>(std::initializer_list<std::shared_ptr<kiln::nn::Module>>{
      std::make_shared<kiln::nn::Linear>(4, 8), std::make_shared<kiln::nn::LayerNorm>(kiln::Shape{8})});
  const kiln::Device cuda(kiln::DeviceType::CUDA, 0);
  norm->to(cuda);
  kiln::export_compiled(norm, {kiln::randn({3, 4}).to(cuda)}, tmp.string());
  const std::string four = read(tmp);
  fs::remove(tmp);
  write("artifact", "linear.bin", std::string(1, '\0') + one);
  write("artifact", "linear-fixed.bin", std::string(1, '\1') + one);
  write("artifact", "mlp-fixed.bin", std::string(1, '\1') + two);
  write("artifact", "truncated.bin", std::string(1, '\0') + one.substr(0, one.size() / 2));
  write("artifact", "magic-only.bin", std::string(1, '\0') + one.substr(0, 8));
  write("artifact", "empty.bin", std::string(1, '\1'));
  write("artifact", "mlp-dynamic-fixed.bin", std::string(1, '\1') + three);
  write("artifact", "cuda-layernorm-fixed.bin", std::string(1, '\1') + four);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " <corpus root (tests/fuzz/corpus)>\n";
    return 2;
  }
  g_root = argv[1];
  ::setenv("KILN_CUDA_SIM", "1", 1); // the CUDA artifact seed is exported on the simulator
  const fs::path source = KILN_SOURCE_DIR;
  safetensors_seeds();
  checkpoint_seeds();
  kernel_cache_seeds();
  dialect_seeds(source / "tests/lit");
  digits_seeds(source / "data/digits.csv.gz");
  artifact_seeds();
  std::cout << "seeds written under " << g_root << "\n";
  return 0;
}
