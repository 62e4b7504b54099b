// kiln::export_compiled + kiln::load_compiled (issue 17). The reference is
// always the compiled model itself: kiln::compile(model) in eval mode under
// NoGradGuard, in this process; the artifact runs in a separate process
// (kiln-run-compiled, which links only kiln_runtime) and must give the same
// bytes. Bad files are checked in process (kiln::load_compiled_from_bytes).
#include <gtest/gtest.h>

#include <elf.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "kiln/export.h"
#include "kiln/kiln.h"
#include "kiln/load_compiled.h"
#include "kiln/runtime/Artifact.h"
#include "kiln/runtime/cuda/CompiledKernel.h"
#include "models/cnn.h"
#include "models/gpt.h"

namespace {

using kiln::Tensor;

/// The CUDA tests run on the CUDA-on-CPU simulator (set before any CUDA
/// backend is made; kiln-run-compiled inherits it).
const kiln::Device kCuda0{kiln::DeviceType::CUDA, 0};
const bool g_cuda_sim = [] {
  if (!std::getenv("KILN_TEST_REAL_CUDA")) ::setenv("KILN_CUDA_SIM", "1", 1);
  return true;
}();

std::string temp_dir() {
  char pattern[] = "/tmp/kiln-export-test-XXXXXX";
  EXPECT_NE(mkdtemp(pattern), nullptr);
  return pattern;
}

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string bytes_of(const Tensor &t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char *>(c.raw_data()), c.numel() * kiln::itemsize(c.dtype()));
}

/// The compiled model's own output for `x` (eval, no grad): the reference.
Tensor compiled_output(const std::shared_ptr<kiln::nn::Module> &model, const Tensor &x) {
  model->eval();
  kiln::NoGradGuard no_grad;
  auto compiled = kiln::compile(model);
  return compiled->forward(x);
}

struct ProcessResult {
  int status = -1;
  std::string out, err;
};

/// Runs kiln-run-compiled (a separate process linking only kiln_runtime).
ProcessResult run_runtime(const std::vector<std::string> &args, const std::string &dir) {
  std::string command = std::string("'") + KILN_RUN_COMPILED + "'";
  for (const std::string &a : args) command += " '" + a + "'";
  command += " >" + dir + "/stdout.txt 2>" + dir + "/stderr.txt";
  ProcessResult r;
  const int raw = std::system(command.c_str());
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(dir + "/stdout.txt");
  r.err = read_file(dir + "/stderr.txt");
  return r;
}

/// Exports `model` for `x`, runs it in a separate process and compares the
/// output bytes with the compiled model's.
void expect_bit_identical(const std::shared_ptr<kiln::nn::Module> &model, const Tensor &x, const std::string &name) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/" + name + ".kiln";
  kiln::ExportReport report = kiln::export_compiled(model, {x}, path);
  EXPECT_GT(report.num_kernels, 0);
  EXPECT_EQ(report.bytes, static_cast<int64_t>(read_file(path).size()));
  const Tensor expected = compiled_output(model, x);
  write_file(dir + "/input-0.bin", bytes_of(x));
  ProcessResult r = run_runtime({path, "--input", dir + "/input-0.bin", "--output-dir", dir}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("load_to_first_output_seconds"), std::string::npos) << r.out;
  const std::string got = read_file(dir + "/output-0.bin");
  const std::string want = bytes_of(expected);
  ASSERT_EQ(got.size(), want.size()) << name;
  EXPECT_TRUE(got == want) << name << ": the exported model's output differs from the compiled model's";
  std::system(("rm -rf '" + dir + "'").c_str());
}

std::shared_ptr<kiln::nn::Module> digits_mlp() {
  using namespace kiln::nn;
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Linear>(64, 128), std::make_shared<ReLU>(), std::make_shared<Linear>(128, 10)});
}

std::shared_ptr<kiln::nn::Module> small_gpt() {
  return std::make_shared<kiln::models::GPT>(/*vocab=*/17, /*context=*/16, /*layers=*/2, /*d_model=*/32, /*heads=*/2,
                                             /*dropout=*/0.1);
}

Tensor gpt_tokens() {
  std::vector<int64_t> idx;
  for (int i = 0; i < 2 * 16; ++i) idx.push_back((i * 7 + 3) % 17);
  return kiln::tensor(idx, {2, 16});
}

TEST(ExportCompiled, DigitsMlpBitIdenticalInSeparateProcess) {
  kiln::manual_seed(1);
  expect_bit_identical(digits_mlp(), kiln::randn({32, 64}), "mlp");
}

TEST(ExportCompiled, GptBitIdenticalInSeparateProcess) {
  kiln::manual_seed(2);
  expect_bit_identical(small_gpt(), gpt_tokens(), "gpt");
}

TEST(ExportCompiled, CnnBitIdenticalInSeparateProcess) {
  kiln::manual_seed(3);
  auto cnn = std::make_shared<kiln::models::DigitsCNN>(8);
  // Batch-norm statistics that are not the initial 0/1, so eval's
  // normalization is exercised: a few training-mode forwards update them.
  for (int i = 0; i < 3; ++i) cnn->forward(kiln::randn({4, 1, 8, 8}));
  expect_bit_identical(cnn, kiln::randn({4, 1, 8, 8}), "cnn");
}

TEST(ExportCompiled, SameModelGivesSameBytes) {
  kiln::manual_seed(4);
  auto model = small_gpt();
  const std::string dir = temp_dir();
  kiln::export_compiled(model, {gpt_tokens()}, dir + "/a.kiln");
  kiln::export_compiled(model, {gpt_tokens()}, dir + "/b.kiln");
  const std::string a = read_file(dir + "/a.kiln"), b = read_file(dir + "/b.kiln");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "two exports of one model differ";
  // Another input of the same shape and dtype traces the same graph.
  kiln::export_compiled(model, {kiln::tensor(std::vector<int64_t>(32, 1), {2, 16})}, dir + "/c.kiln");
  EXPECT_TRUE(a == read_file(dir + "/c.kiln"));
  std::system(("rm -rf '" + dir + "'").c_str());
}

/// One exported MLP, shared by the checks below.
class ExportedMlp : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    kiln::manual_seed(5);
    dir_ = temp_dir();
    model_ = digits_mlp();
    kiln::export_compiled(model_, {kiln::randn({8, 64})}, dir_ + "/mlp.kiln");
    bytes_ = read_file(dir_ + "/mlp.kiln");
  }
  static void TearDownTestSuite() { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  static std::string load_error(const std::string &bytes) {
    try {
      kiln::load_compiled_from_bytes(bytes, "bad.kiln");
    } catch (const kiln::runtime::LoadError &e) {
      return e.what();
    }
    return "";
  }
  /// `bytes_` re-written with `edit` applied to its decoded contents (a
  /// valid checksum, so the check under test is the one that fires).
  template <class Edit> static std::string rewritten(Edit edit) {
    kiln::runtime::artifact::Contents c;
    std::string error;
    kiln::runtime::artifact::ReadOptions options;
    EXPECT_TRUE(kiln::runtime::artifact::read_artifact(bytes_, "mlp.kiln", options, &c, &error)) << error;
    edit(c);
    return kiln::runtime::artifact::write_artifact(c);
  }
  static std::string dir_, bytes_;
  static std::shared_ptr<kiln::nn::Module> model_;
};
std::string ExportedMlp::dir_, ExportedMlp::bytes_;
std::shared_ptr<kiln::nn::Module> ExportedMlp::model_;

TEST_F(ExportedMlp, RunsInProcessLikeTheCompiledModel) {
  kiln::manual_seed(6);
  const Tensor x = kiln::randn({8, 64});
  kiln::LoadedModel m = kiln::load_compiled(dir_ + "/mlp.kiln");
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].sizes, (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(m.outputs()[0].sizes, (std::vector<int64_t>{8, 10}));
  EXPECT_EQ(m.model_name(), model_->name());
  EXPECT_EQ(m.weight_bytes(), (64 * 128 + 128 + 128 * 10 + 10) * 4);
  std::vector<kiln::runtime::HostTensor> out = m.run({kiln::runtime::HostTensor::from_floats(x.to_vector<float>(), {8, 64})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to_floats(), compiled_output(model_, x).to_vector<float>());
}

TEST_F(ExportedMlp, InputsAreCheckedAgainstTheGuards) {
  kiln::LoadedModel m = kiln::load_compiled_from_bytes(bytes_, "mlp.kiln");
  auto error_of = [&](const std::vector<kiln::runtime::HostTensor> &xs) {
    try {
      m.run(xs);
    } catch (const kiln::runtime::LoadError &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  using kiln::runtime::ElementType;
  using kiln::runtime::HostTensor;
  EXPECT_EQ(error_of({HostTensor::zeros(ElementType::Float32, {16, 64})}),
            "mlp.kiln: input 0: expected float32 [8, 64], got float32 [16, 64]");
  EXPECT_EQ(error_of({HostTensor::zeros(ElementType::Float64, {8, 64})}),
            "mlp.kiln: input 0: expected float32 [8, 64], got float64 [8, 64]");
  EXPECT_EQ(error_of({}), "mlp.kiln: run: expected 1 input tensors, got 0");
  HostTensor short_data = HostTensor::zeros(ElementType::Float32, {8, 64});
  short_data.data.resize(10);
  EXPECT_EQ(error_of({short_data}), "mlp.kiln: input 0: holds 10 bytes, expected 2048 for [8, 64]");
}

TEST_F(ExportedMlp, BadFilesAreRejectedWithAClearMessage) {
  EXPECT_EQ(load_error(""), "bad.kiln: not a Kiln exported model (expected the magic 'KILNEXP' in the first 8 bytes; "
                            "write one with kiln::export_compiled)");
  EXPECT_NE(load_error(bytes_.substr(0, bytes_.size() / 2)).find("bad.kiln: truncated: the header says"), std::string::npos);
  EXPECT_NE(load_error(bytes_.substr(0, 20)).find("truncated"), std::string::npos);
  // A flipped byte anywhere (header, sections, padding, trailer) fails.
  for (size_t at : {size_t(40), size_t(200), bytes_.size() / 2, bytes_.size() - 100, bytes_.size() - 1}) {
    std::string flipped = bytes_;
    flipped[at] ^= 0x10;
    EXPECT_FALSE(load_error(flipped).empty()) << "flipped byte " << at;
  }
  std::string flipped = bytes_;
  flipped[bytes_.size() / 2] ^= 1;
  EXPECT_NE(load_error(flipped).find("checksum mismatch"), std::string::npos) << load_error(flipped);
  std::string version = bytes_;
  version[8] = 7;
  EXPECT_EQ(load_error(version), "bad.kiln: format version 7, this runtime reads versions 1 to 2 (export the model "
                                 "again with this Kiln)");
  EXPECT_NE(load_error(read_file(KILN_SOURCE_DIR "/data/digits.csv.gz")).find("not a Kiln exported model"),
            std::string::npos);
}

TEST_F(ExportedMlp, FormatVersion1CpuArtifactsStillLoad) {
  std::string v1 = rewritten([](kiln::runtime::artifact::Contents &c) { c.format_version = 1; });
  ASSERT_EQ(static_cast<uint8_t>(v1[8]), 1);
  kiln::LoadedModel m = kiln::load_compiled_from_bytes(v1, "v1.kiln");
  kiln::LoadedModel now = kiln::load_compiled_from_bytes(bytes_, "mlp.kiln");
  auto x = kiln::runtime::HostTensor::zeros(kiln::runtime::ElementType::Float32, {8, 64});
  EXPECT_EQ(m.run({x})[0].data, now.run({x})[0].data);
}

TEST_F(ExportedMlp, WrongIsaIsRejected) {
  std::string isa = rewritten([](kiln::runtime::artifact::Contents &c) {
    c.cpu_features.push_back("zz-feature-no-cpu-has");
  });
  EXPECT_EQ(load_error(isa), "bad.kiln: wrong ISA: the kernels were compiled for a CPU with zz-feature-no-cpu-has, "
                             "which this CPU lacks (export the model on a machine like this one)");
  std::string target = rewritten([](kiln::runtime::artifact::Contents &c) { c.target = "aarch64-linux"; });
  EXPECT_EQ(load_error(target), "bad.kiln: exported for target 'aarch64-linux', this runtime runs 'x86_64-linux' "
                                "object code and 'cuda' device code");
  std::string machine = rewritten([](kiln::runtime::artifact::Contents &c) { c.kernels[18] = static_cast<char>(183); });
  EXPECT_EQ(load_error(machine), "bad.kiln: kernels: wrong ISA: object code for ELF machine 183, expected x86-64 (62)");
}

TEST_F(ExportedMlp, MalformedSectionsAreRejected) {
  std::string no_kernels = rewritten([](kiln::runtime::artifact::Contents &c) { c.kernels = "\x7f" "ELF"; });
  EXPECT_NE(load_error(no_kernels).find("kernels: truncated ELF object"), std::string::npos) << load_error(no_kernels);
  std::string program = rewritten([](kiln::runtime::artifact::Contents &c) { c.program = "{\"steps\": 3}"; });
  EXPECT_NE(load_error(program).find("bad.kiln: program:"), std::string::npos) << load_error(program);
  std::string weights = rewritten([](kiln::runtime::artifact::Contents &c) { c.safetensors.resize(c.safetensors.size() - 4); });
  EXPECT_NE(load_error(weights).find("bad.kiln: weights: tensor"), std::string::npos) << load_error(weights);
  std::string missing = rewritten([](kiln::runtime::artifact::Contents &c) { c.weights[0] = "nope"; });
  EXPECT_EQ(load_error(missing), "bad.kiln: weights: tensor 'nope' is missing from the safetensors section");
}

TEST_F(ExportedMlp, EmptySymbolTableIsRejected) {
  // Found by kiln-fuzz-artifact (tests/fuzz/corpus/artifact/crash-empty-symtab):
  // a symbol table of size 0 reached memcpy with a null destination.
  std::string empty = rewritten([](kiln::runtime::artifact::Contents &c) {
    Elf64_Ehdr eh;
    ASSERT_GE(c.kernels.size(), sizeof eh);
    std::memcpy(&eh, c.kernels.data(), sizeof eh);
    int found = 0;
    for (int i = 0; i < eh.e_shnum; ++i) {
      Elf64_Shdr sh;
      const size_t at = eh.e_shoff + size_t(i) * eh.e_shentsize;
      ASSERT_LE(at + sizeof sh, c.kernels.size());
      std::memcpy(&sh, c.kernels.data() + at, sizeof sh);
      if (sh.sh_type != SHT_SYMTAB) continue;
      sh.sh_size = 0;
      std::memcpy(c.kernels.data() + at, &sh, sizeof sh);
      ++found;
    }
    ASSERT_EQ(found, 1);
  });
  EXPECT_EQ(load_error(empty), "bad.kiln: kernels: empty symbol table (expected at least the null symbol)");
}

TEST_F(ExportedMlp, SeparateProcessReportsBadFiles) {
  write_file(dir_ + "/truncated.kiln", bytes_.substr(0, 100));
  ProcessResult r = run_runtime({dir_ + "/truncated.kiln"}, dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("truncated.kiln: truncated: the header says"), std::string::npos) << r.err;
  write_file(dir_ + "/small-input.bin", std::string(16, '\0'));
  r = run_runtime({dir_ + "/mlp.kiln", "--input", dir_ + "/small-input.bin"}, dir_);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("small-input.bin: 16 bytes, expected 2048 for input 0 (float32 [8, 64])"), std::string::npos)
      << r.err;
  // --help says what an input file holds; --info lists inputs and outputs;
  // --output-dir is created.
  r = run_runtime({"--help"}, dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("raw bytes, row-major, little-endian"), std::string::npos) << r.out;
  r = run_runtime({dir_ + "/mlp.kiln", "--info"}, dir_);
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("input 0: float32 [8, 64]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output 0: float32 [8, 10]"), std::string::npos) << r.out;
  write_file(dir_ + "/x.bin", std::string(8 * 64 * 4, '\0'));
  r = run_runtime({dir_ + "/mlp.kiln", "--input", dir_ + "/x.bin", "--output-dir", dir_ + "/new/out"}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(dir_ + "/new/out/output-0.bin").size(), 8u * 10 * 4);
}

TEST(ExportCompiled, WorksWithTheKernelCacheOff) {
  // KILN_CACHE_DIR= turns the cache off: the export compiles into a
  // temporary cache folder of its own and removes it. KILN_DISABLE_CACHE=1
  // turns off every cache, so the export says what to do.
  const char *old = std::getenv("KILN_CACHE_DIR");
  const std::string saved = old ? old : "";
  setenv("KILN_CACHE_DIR", "", 1);
  kiln::manual_seed(7);
  const std::string dir = temp_dir();
  kiln::ExportReport report = kiln::export_compiled(digits_mlp(), {kiln::randn({4, 64})}, dir + "/off.kiln");
  EXPECT_GT(report.num_kernels, 0);
  EXPECT_NO_THROW(kiln::load_compiled(dir + "/off.kiln"));
  setenv("KILN_DISABLE_CACHE", "1", 1);
  try {
    kiln::export_compiled(digits_mlp(), {kiln::randn({4, 64})}, dir + "/never.kiln");
    ADD_FAILURE() << "no error";
  } catch (const kiln::Error &e) {
    EXPECT_NE(std::string(e.what()).find("KILN_DISABLE_CACHE=1 is set"), std::string::npos) << e.what();
  }
  unsetenv("KILN_DISABLE_CACHE");
  if (old) setenv("KILN_CACHE_DIR", saved.c_str(), 1);
  else unsetenv("KILN_CACHE_DIR");
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ExportCompiled, ErrorsNameTheProblem) {
  auto model = digits_mlp();
  try {
    kiln::export_compiled(model, {}, "/tmp/never.kiln");
    FAIL() << "no error";
  } catch (const kiln::Error &e) {
    EXPECT_NE(std::string(e.what()).find("no example inputs"), std::string::npos) << e.what();
  }
  try {
    kiln::export_compiled(model, {kiln::randn({2, 64})}, "/nonexistent-dir/x.kiln");
    FAIL() << "no error";
  } catch (const kiln::Error &e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.kiln"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(model->is_training()) << "export_compiled restores the training flag";
}

TEST(ExportCompiled, CompiledModuleIsExportedAsTheModuleItWraps) {
  // kiln::compile's result runs compiled code the tracer does not see: it
  // used to be exported with its example output stored as a constant (found
  // by a first-time user following the README). Now the module it wraps is.
  kiln::manual_seed(11);
  auto model = digits_mlp();
  std::shared_ptr<kiln::CompiledModule> compiled = kiln::compile(model);
  const std::string dir = temp_dir();
  const kiln::ExportReport report = kiln::export_compiled(compiled, {kiln::randn({4, 64})}, dir + "/c.kiln");
  EXPECT_GT(report.num_launches, 0);
  kiln::LoadedModel m = kiln::load_compiled(dir + "/c.kiln");
  EXPECT_EQ(m.model_name(), model->name());
  const Tensor y = kiln::randn({4, 64});
  EXPECT_EQ(m.run({kiln::runtime::HostTensor::from_floats(y.to_vector<float>(), {4, 64})})[0].to_floats(),
            compiled_output(model, y).to_vector<float>());
  std::system(("rm -rf '" + dir + "'").c_str());
}

/// Returns a parameter whatever its input: no output depends on the inputs.
struct ConstantOutput : kiln::nn::Module {
  Tensor w;
  ConstantOutput() { w = register_parameter("w", kiln::randn({4, 3})); }
  Tensor forward(const Tensor &) override { return w; }
  std::string name() const override { return "ConstantOutput"; }
};

TEST(ExportCompiled, AnOutputThatIgnoresTheInputsIsAnError) {
  try {
    kiln::export_compiled(std::make_shared<ConstantOutput>(), {kiln::randn({4, 3})}, "/tmp/never.kiln");
    FAIL() << "no error";
  } catch (const kiln::Error &e) {
    EXPECT_NE(std::string(e.what()).find("kiln::export_compiled: ConstantOutput: no output depends on the inputs"),
              std::string::npos)
        << e.what();
  }
}

// ---- CUDA artifacts (on the simulator) ----------------------------------------

/// The section table of an artifact file, parsed by hand (FORMAT.md): tag ->
/// (offset, size).
std::map<std::string, std::pair<uint64_t, uint64_t>> sections_of(const std::string &bytes) {
  auto u64 = [&](size_t at) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(bytes[at + i]);
    return v;
  };
  std::map<std::string, std::pair<uint64_t, uint64_t>> out;
  const uint32_t n = static_cast<uint8_t>(bytes[12]);
  for (uint32_t i = 0; i < n; ++i) {
    const size_t at = 32 + 24 * i;
    out[std::string(bytes.c_str() + at, strnlen(bytes.c_str() + at, 8))] = {u64(at + 8), u64(at + 16)};
  }
  return out;
}

/// zlib's CRC-32 (the artifact's trailer), bit by bit.
uint32_t crc32_of(const std::string &bytes, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= static_cast<uint8_t>(bytes[i]);
    for (int k = 0; k < 8; ++k) crc = crc >> 1 ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

/// `bytes` with its trailer recomputed (so a structural check fires, not the CRC).
std::string with_valid_crc(std::string bytes) {
  const uint32_t crc = crc32_of(bytes, bytes.size() - 8);
  for (int i = 0; i < 4; ++i) bytes[bytes.size() - 8 + i] = static_cast<char>(crc >> (8 * i) & 0xff);
  return bytes;
}

std::string load_error_of(const std::string &bytes) {
  try {
    kiln::load_compiled_from_bytes(bytes, "cuda.kiln");
  } catch (const kiln::runtime::LoadError &e) {
    return e.what();
  }
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Exports `model` on cuda-sim for `x`, runs the artifact in a separate
/// process (kiln_runtime only, KILN_CUDA_SIM=1) and compares its output
/// bytes with the compiled model's on cuda-sim. Returns the artifact.
std::string expect_cuda_bit_identical(const std::shared_ptr<kiln::nn::Module> &model, const Tensor &x,
                                      const std::string &name) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/" + name + ".kiln";
  const Tensor xc = x.to(kCuda0);
  model->to(kCuda0);
  kiln::ExportReport report = kiln::export_compiled(model, {xc}, path);
  EXPECT_GT(report.num_kernels, 0);
  const std::string bytes = read_file(path);
  EXPECT_EQ(report.bytes, static_cast<int64_t>(bytes.size()));
  // Reference: the compiled model on cuda-sim, timed to its first output
  // with a warm kernel cache (the export compiled the same kernels).
  model->eval();
  auto start = std::chrono::steady_clock::now();
  Tensor expected;
  {
    kiln::NoGradGuard no_grad;
    auto compiled = kiln::compile(model);
    expected = compiled->forward(xc).cpu();
  }
  const double compile_seconds = seconds_since(start);
  write_file(dir + "/input-0.bin", bytes_of(x));
  ProcessResult r = run_runtime({path, "--input", dir + "/input-0.bin", "--output-dir", dir}, dir);
  EXPECT_EQ(r.status, 0) << r.err;
  std::printf("[cuda export] %s: %zu bytes (%lld of weights, %d kernels); kiln::compile to first output %.3f s "
              "(warm cache), kiln-run-compiled %s",
              name.c_str(), bytes.size(), static_cast<long long>(report.weight_bytes), report.num_kernels,
              compile_seconds, r.out.c_str());
  const std::string got = read_file(dir + "/output-0.bin");
  const std::string want = bytes_of(expected);
  EXPECT_EQ(got.size(), want.size()) << name;
  EXPECT_TRUE(got == want) << name << ": the exported CUDA model's output differs from the compiled model's";
  // KILN_EXPORT_TEST_KEEP=DIR keeps the artifact and its input (for timing
  // kiln-run-compiled by hand, bench/README.md).
  if (const char *keep = std::getenv("KILN_EXPORT_TEST_KEEP")) {
    write_file(std::string(keep) + "/cuda-" + name + ".kiln", bytes);
    write_file(std::string(keep) + "/cuda-" + name + ".input-0.bin", bytes_of(x));
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  return bytes;
}

/// The digits MLP with a LayerNorm: CUDA kernels besides the GEMM epilogues
/// (the plain MLP's bias+ReLU and bias fold into its two GEMMs: no unit).
std::shared_ptr<kiln::nn::Module> digits_mlp_ln() {
  using namespace kiln::nn;
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Linear>(64, 128), std::make_shared<LayerNorm>(kiln::Shape{128}), std::make_shared<ReLU>(),
      std::make_shared<Linear>(128, 10)});
}

TEST(ExportCuda, DigitsMlpBitIdenticalInSeparateProcess) {
  kiln::manual_seed(11);
  const std::string bytes = expect_cuda_bit_identical(digits_mlp(), kiln::randn({32, 64}), "mlp");
  kiln::runtime::artifact::Contents c;
  std::string error;
  ASSERT_TRUE(kiln::runtime::artifact::read_artifact(bytes, "mlp.kiln", {}, &c, &error)) << error;
  EXPECT_TRUE(c.cuda_units.empty()) << "GEMMs with cuBLASLt epilogues only";
}

TEST(ExportCuda, DigitsMlpWithLayerNormCarriesCubinPtxAndSource) {
  kiln::manual_seed(11);
  const std::string bytes = expect_cuda_bit_identical(digits_mlp_ln(), kiln::randn({32, 64}), "mlp_ln");
  // The sections, parsed from the file: a CUDA artifact has 6, its units an
  // sm_90 CUBIN (an ELF), PTX for compute_90 and the source.
  auto sections = sections_of(bytes);
  ASSERT_EQ(sections.size(), 6u);
  EXPECT_EQ(sections.count("cuda"), 1u);
  EXPECT_EQ(sections.count("cudabin"), 1u);
  EXPECT_EQ(static_cast<uint8_t>(bytes[8]), kiln::runtime::artifact::kFormatVersion);
  kiln::runtime::artifact::Contents c;
  std::string error;
  ASSERT_TRUE(kiln::runtime::artifact::read_artifact(bytes, "mlp.kiln", {}, &c, &error)) << error;
  EXPECT_EQ(c.target, "cuda");
  ASSERT_FALSE(c.cuda_units.empty());
  for (const auto &u : c.cuda_units) {
    ASSERT_EQ(u.cubins.size(), 1u);
    EXPECT_EQ(u.cubins[0].first, "sm_90");
    EXPECT_GT(u.cubins[0].second.size(), 0u);
    EXPECT_EQ(u.cubins[0].second.compare(0, 4, "\x7f" "ELF"), 0) << "a CUBIN is an ELF file";
    EXPECT_EQ(u.ptx_arch, "compute_90");
    EXPECT_NE(u.ptx.find(".target sm_90"), std::string::npos);
    EXPECT_NE(u.source.find("extern \"C\" __global__"), std::string::npos);
    for (const std::string &k : u.kernel_names) EXPECT_NE(u.source.find(k), std::string::npos) << k;
  }
  EXPECT_TRUE(c.kernels.empty()) << "no x86-64 object code in a CUDA artifact";
}

TEST(ExportCuda, GptBitIdenticalInSeparateProcess) {
  kiln::manual_seed(12);
  expect_cuda_bit_identical(small_gpt(), gpt_tokens(), "gpt");
}

TEST(ExportCuda, SameModelGivesSameBytes) {
  kiln::manual_seed(13);
  auto model = digits_mlp_ln();
  model->to(kCuda0);
  const std::string dir = temp_dir();
  const Tensor x = kiln::randn({8, 64}).to(kCuda0);
  kiln::export_compiled(model, {x}, dir + "/a.kiln");
  kiln::export_compiled(model, {x}, dir + "/b.kiln");
  const std::string a = read_file(dir + "/a.kiln"), b = read_file(dir + "/b.kiln");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "two CUDA exports of one model differ";
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ExportCuda, InProcessRunAndCorruptCudaSectionsAreRejected) {
  kiln::manual_seed(14);
  auto model = digits_mlp_ln();
  model->to(kCuda0);
  const std::string dir = temp_dir();
  const Tensor x = kiln::randn({8, 64});
  kiln::export_compiled(model, {x.to(kCuda0)}, dir + "/m.kiln");
  const std::string bytes = read_file(dir + "/m.kiln");
  std::system(("rm -rf '" + dir + "'").c_str());
  kiln::LoadedModel m = kiln::load_compiled_from_bytes(bytes, "cuda.kiln");
  EXPECT_EQ(m.target(), "cuda");
  EXPECT_EQ(m.device(), "cuda:0");
  EXPECT_TRUE(m.cpu_features().empty());
  auto out = m.run({kiln::runtime::HostTensor::from_floats(x.to_vector<float>(), {8, 64})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{8, 10}));

  auto sections = sections_of(bytes);
  const auto [bin_at, bin_size] = sections.at("cudabin");
  const auto [index_at, index_size] = sections.at("cuda");
  // A flipped byte in a CUBIN: the checksum.
  std::string flipped = bytes;
  flipped[bin_at + bin_size / 2] ^= 0x20;
  EXPECT_NE(load_error_of(flipped).find("checksum mismatch"), std::string::npos) << load_error_of(flipped);
  // A CUDA section cut short (the range of a blob past 'cudabin'), CRC valid.
  std::string index = bytes.substr(index_at, index_size);
  const size_t range = index.find("\"range\"");
  ASSERT_NE(range, std::string::npos);
  const size_t digit = index.find_first_of("123456789", range);
  std::string cut = bytes;
  cut[index_at + digit] = '9';
  cut[index_at + digit - 1] = '9';  // a larger offset (replaces the '[' or a space/digit before it)
  std::string e = load_error_of(with_valid_crc(cut));
  EXPECT_NE(e.find("cuda.kiln:"), std::string::npos) << e;
  EXPECT_TRUE(e.find("section 'cuda'") != std::string::npos) << e;
  // The 'cuda' index replaced by junk of the same length.
  std::string junk = bytes;
  for (size_t i = 0; i < index_size; ++i) junk[index_at + i] = 'x';
  e = load_error_of(with_valid_crc(junk));
  EXPECT_EQ(e, "cuda.kiln: section 'cuda' is not a JSON object with 'units'") << e;
  // A CUDA artifact with the CPU section count.
  std::string count = bytes;
  count[12] = 4;
  e = load_error_of(with_valid_crc(count));
  EXPECT_NE(e.find("target 'cuda' with 4 sections"), std::string::npos) << e;
  // An empty CUBIN entry, written by the writer itself.
  kiln::runtime::artifact::Contents c;
  std::string error;
  ASSERT_TRUE(kiln::runtime::artifact::read_artifact(bytes, "cuda.kiln", {}, &c, &error)) << error;
  c.cuda_units[0].cubins[0].second.clear();
  e = load_error_of(kiln::runtime::artifact::write_artifact(c));
  EXPECT_NE(e.find("unit 0: bad CUBIN entry 'sm_90' (0 bytes)"), std::string::npos) << e;
}

TEST(ExportCuda, TheGpuLoadsItsCubinElsePtxElseNamesTheArchs) {
  namespace rc = kiln::runtime::cuda;
  rc::ModuleImages images{{{"sm_80", "cubin80"}, {"sm_90", "cubin90"}}, std::string("ptx\0", 4), "compute_80"};
  EXPECT_EQ(rc::choose_module_image(images, 90, "k"), "cubin90");
  EXPECT_EQ(rc::choose_module_image(images, 80, "k"), "cubin80");
  EXPECT_EQ(rc::choose_module_image(images, 100, "k"), std::string("ptx\0", 4)) << "a newer GPU JITs the PTX";
  try {
    rc::choose_module_image(images, 75, "k");
    FAIL() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_EQ(std::string(e.what()), "k: no device code for this GPU (sm_75): the artifact has sm_80, sm_90, "
                                     "compute_80 (PTX); export it with cuda_archs including \"sm_75\"");
  }
  images.ptx.clear();
  EXPECT_THROW(rc::choose_module_image(images, 100, "k"), std::runtime_error);
}

TEST(ExportCuda, ErrorsNameTheDeviceAndArch) {
  auto model = digits_mlp();
  model->to(kCuda0);
  const Tensor x = kiln::randn({2, 64}).to(kCuda0);
  kiln::ExportOptions options;
  options.cuda_archs = {"sm_9x"};
  try {
    kiln::export_compiled(model, {x}, "/tmp/never.kiln", options);
    FAIL() << "no error";
  } catch (const kiln::Error &e) {
    EXPECT_NE(std::string(e.what()).find("cuda_archs has 'sm_9x'"), std::string::npos) << e.what();
  }
  // Inputs on cuda:0, the model's weights on the CPU: the error names both devices.
  auto cpu_model = digits_mlp();
  try {
    kiln::export_compiled(cpu_model, {x}, "/tmp/never.kiln");
    FAIL() << "no error";
  } catch (const kiln::Error &e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("cuda:0") != std::string::npos && what.find("cpu") != std::string::npos) << what;
  }
}

// ---- dynamic dims (ExportOptions::dynamic_dims) --------------------------------

/// Exports `model` with input 0's dim 0 dynamic (example `x`), then runs the
/// artifact in process at other batch sizes and compares with kiln::compile
/// of the model at each size (automatic dynamic shapes: its shape-generic
/// kernels after the second size).
void expect_dynamic_batch(const std::shared_ptr<kiln::nn::Module> &model, const std::function<Tensor(int64_t)> &input,
                          kiln::Device device, const std::string &name) {
  const std::string dir = temp_dir();
  kiln::ExportOptions options;
  options.dynamic_dims = {{0, {0}}};
  kiln::export_compiled(model, {input(4).to(device)}, dir + "/" + name + ".kiln", options);
  kiln::LoadedModel m = kiln::load_compiled(dir + "/" + name + ".kiln");
  EXPECT_EQ(m.inputs()[0].sizes[0], -1);
  model->eval();
  kiln::NoGradGuard no_grad;
  auto compiled = kiln::compile(model);
  for (int64_t batch : {4, 5, 3, 16, 2}) {
    const Tensor x = input(batch);
    const Tensor want = compiled->forward(x.to(device)).cpu();
    kiln::runtime::HostTensor hx;
    hx.dtype = static_cast<kiln::runtime::ElementType>(x.dtype());
    hx.sizes = x.sizes();
    const std::string raw = bytes_of(x);
    hx.data.assign(raw.begin(), raw.end());
    auto out = m.run({hx});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].sizes, want.sizes()) << name << " batch " << batch;
    const std::string got(out[0].data.begin(), out[0].data.end());
    EXPECT_TRUE(got == bytes_of(want)) << name << " batch " << batch << ": differs from kiln::compile";
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ExportDynamic, DigitsMlpAnyBatchOnCpu) {
  kiln::manual_seed(21);
  auto model = digits_mlp();
  expect_dynamic_batch(model, [](int64_t b) { return kiln::randn({b, 64}); }, kiln::kCPU, "mlp");
}

TEST(ExportDynamic, GptAnyBatchOnCpu) {
  kiln::manual_seed(22);
  auto model = small_gpt();
  auto tokens = [](int64_t b) {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < b * 16; ++i) idx.push_back((i * 5 + 1) % 17);
    return kiln::tensor(idx, {b, 16});
  };
  expect_dynamic_batch(model, tokens, kiln::kCPU, "gpt");
}

TEST(ExportDynamic, MlpWithLayerNormAnyBatchOnCudaSim) {
  kiln::manual_seed(23);
  auto model = digits_mlp_ln();
  model->to(kCuda0);
  expect_dynamic_batch(model, [](int64_t b) { return kiln::randn({b, 64}); }, kCuda0, "mlp_ln");
}

TEST(ExportDynamic, SeparateProcessRunsAnyBatchAndBytesAreDeterministic) {
  kiln::manual_seed(25);
  auto model = small_gpt();
  const std::string dir = temp_dir();
  kiln::ExportOptions options;
  options.dynamic_dims = {{0, {0}}};
  kiln::export_compiled(model, {gpt_tokens()}, dir + "/a.kiln", options);
  kiln::export_compiled(model, {gpt_tokens()}, dir + "/b.kiln", options);
  EXPECT_TRUE(read_file(dir + "/a.kiln") == read_file(dir + "/b.kiln")) << "two dynamic exports differ";
  std::vector<int64_t> idx;
  for (int i = 0; i < 5 * 16; ++i) idx.push_back((i * 3 + 2) % 17);
  const Tensor x = kiln::tensor(idx, {5, 16});
  write_file(dir + "/input-0.bin", bytes_of(x));
  ProcessResult r = run_runtime({dir + "/a.kiln", "--input", dir + "/input-0.bin", "--output-dir", dir}, dir);
  ASSERT_EQ(r.status, 0) << r.err;
  model->eval();
  kiln::NoGradGuard no_grad;
  auto compiled = kiln::compile(model);
  compiled->forward(gpt_tokens());  // batch 2, then 5: the shape-generic kernels, as the artifact's
  const std::string want = bytes_of(compiled->forward(x));
  EXPECT_TRUE(read_file(dir + "/output-0.bin") == want) << "batch 5 in kiln-run-compiled differs from kiln::compile";
  write_file(dir + "/ragged.bin", std::string(100, '\0'));  // not a whole number of 16-token rows (128 bytes)
  r = run_runtime({dir + "/a.kiln", "--input", dir + "/ragged.bin"}, dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("ragged.bin: 100 bytes, expected a multiple of 128 for input 0"), std::string::npos) << r.err;
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(ExportDynamic, GuardsNameTheDimAndTheExpectedSize) {
  kiln::manual_seed(24);
  const std::string dir = temp_dir();
  kiln::ExportOptions options;
  options.dynamic_dims = {{0, {0}}};
  kiln::export_compiled(digits_mlp(), {kiln::randn({4, 64})}, dir + "/m.kiln", options);
  kiln::LoadedModel m = kiln::load_compiled(dir + "/m.kiln");
  std::system(("rm -rf '" + dir + "'").c_str());
  auto error_of = [&](std::vector<int64_t> sizes) {
    try {
      m.run({kiln::runtime::HostTensor::zeros(kiln::runtime::ElementType::Float32, std::move(sizes))});
    } catch (const kiln::runtime::LoadError &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of({7, 64}), "");
  EXPECT_EQ(m.inputs()[0].sizes, (std::vector<int64_t>{-1, 64}));
  EXPECT_NE(error_of({7, 32}).find("input 0: dim 1: expected size 64, got 32"), std::string::npos) << error_of({7, 32});
  EXPECT_NE(error_of({1, 64}).find("input 0: dim 0: expected size >= 2 (dynamic), got 1"), std::string::npos)
      << error_of({1, 64});
  try {
    kiln::ExportOptions two;
    two.dynamic_dims = {{0, {0, 1}}};
    kiln::export_compiled(digits_mlp(), {kiln::randn({4, 64})}, "/tmp/never.kiln", two);
    FAIL() << "no error";
  } catch (const kiln::Error &e) {
    EXPECT_NE(std::string(e.what()).find("more than one dim"), std::string::npos) << e.what();
  }
}

} // namespace
