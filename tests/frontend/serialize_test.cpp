// kiln::save/load (safetensors), checkpoints and CheckpointManager.
// Expected bytes are hand-built from the safetensors spec (CRC-32 values
// computed with Python's zlib.crc32); a file is also read back by the
// independent Python reader tests/tools/read_safetensors.py when python3 exists.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/lr_scheduler.h"
#include "kiln/serialize.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/kiln-serialize-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  std::string file(const std::string &name) const { return path + "/" + name; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto &e : fs::directory_iterator(path))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string path;
};

std::string read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A safetensors file from a header text and data bytes (no Kiln entry).
std::string raw_file(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

/// The kiln::Error message `fn` throws ("" and a failure if none).
template <class F> std::string error_of(F fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  ADD_FAILURE() << "expected kiln::Error";
  return "";
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

void expect_same_tensor(const Tensor &expected, const Tensor &actual) {
  ASSERT_EQ(expected.dtype(), actual.dtype());
  ASSERT_EQ(expected.sizes(), actual.sizes());
  EXPECT_TRUE(actual.is_contiguous());
  Tensor e = expected.contiguous();
  const size_t n = static_cast<size_t>(e.numel()) * itemsize(e.dtype());
  if (n) {
    EXPECT_EQ(std::memcmp(e.raw_data(), actual.raw_data(), n), 0);
  }
}

// ---- format ---------------------------------------------------------------------------

TEST(Serialize, RoundTripEveryDtypeAndLayout) {
  TempDir dir;
  Tensor base = tensor({1.5f, -2.f, 3.25f, 0.f, -0.5f, 1e-3f}, {2, 3});
  NamedTensors tensors = {
      {"f32", base},
      {"f64", base.to(kFloat64)},
      {"f16", base.to(kFloat16)},
      {"bf16", base.to(kBFloat16)},
      {"i64", tensor(std::vector<int64_t>{-5, 0, 1LL << 40}, {3})},
      {"i32", tensor(std::vector<int64_t>{-7, 8}, {2}).to(kInt32)},
      {"bool", gt(base, zeros({2, 3}))},
      {"scalar", scalar_tensor(2.5, kFloat64)},
      {"empty", zeros({0, 3})},
      {"transposed", base.t()},                     // non-contiguous
      {"narrowed", base.narrow(1, 1, 2)},           // storage offset + strides
      {"expanded", tensor({4.f}, {1}).expand({3})}, // stride 0
  };
  const std::string path = dir.file("all.safetensors");
  save(path, tensors, {{"note", "hello"}});
  LoadedTensors loaded = load(path);
  EXPECT_TRUE(loaded.verified);
  EXPECT_EQ(loaded.metadata, (std::map<std::string, std::string>{{"note", "hello"}}));
  EXPECT_EQ(loaded.checkpoint_json, "");
  ASSERT_EQ(loaded.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ(loaded.tensors[i].first, tensors[i].first);
    expect_same_tensor(tensors[i].second, loaded.tensors[i].second);
  }
  EXPECT_EQ(loaded.at("scalar").dim(), 0);
  EXPECT_EQ(loaded.at("transposed").to_vector<double>(), (std::vector<double>{1.5, 0, -2, -0.5, 3.25, 1e-3f}));
  EXPECT_HAS(error_of([&] { loaded.at("nope"); }), "'f32', 'f64'");
  verify(path);
}

TEST(Serialize, ByteLayoutMatchesTheSpec) {
  TempDir dir;
  const std::string path = dir.file("tiny.safetensors");
  save(path, {{"a", tensor({1.f, -2.f}, {2})}, {"b", tensor(std::vector<int64_t>{1, 0, 1}, {3}).to(kBool)}});
  // Header (212 bytes of JSON + 4 spaces = 216 = 0xd8, a multiple of 8).
  // CRC-32s from Python: zlib.crc32 of the 11 data bytes = 1370965205; of
  // '{"__metadata__":{},"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},
  //   "b":{"data_offsets":[8,11],"dtype":"BOOL","shape":[3]}}' = 1424565585.
  const std::string header =
      R"({"__metadata__":{"kiln":"{\"data_crc32\":1370965205,\"format_version\":1,\"header_crc32\":1424565585}"},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BOOL","shape":[3],"data_offsets":[8,11]}})"
      "    ";
  ASSERT_EQ(header.size(), 216u);
  std::string expected("\xd8\0\0\0\0\0\0\0", 8);
  expected += header;
  expected += std::string("\x00\x00\x80\x3f", 4); // 1.0f little-endian
  expected += std::string("\x00\x00\x00\xc0", 4); // -2.0f
  expected += std::string("\x01\x00\x01", 3);
  EXPECT_EQ(read_bytes(path), expected);
}

TEST(Serialize, IndependentPythonReaderReadsKilnFiles) {
  if (std::system("command -v python3 >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 not found";
  TempDir dir;
  const std::string path = dir.file("py.safetensors");
  save(path,
       {{"w", tensor({1.f, 2.f, 3.f, 4.f}, {2, 2}).t()},
        {"h", tensor({0.5f, -1.f, 2.f}, {3}).to(kFloat16)},
        {"bf", tensor({1.5f}, {1}).to(kBFloat16)},
        {"idx", arange(3)},
        {"i32", tensor(std::vector<int64_t>{-2}, {1}).to(kInt32)},
        {"mask", tensor(std::vector<int64_t>{1, 0}, {2}).to(kBool)},
        {"s", scalar_tensor(2.5, kFloat64)},
        {"e", zeros({0, 2})}},
       {{"note", "hello"}});
  const std::string cmd = std::string("python3 ") + KILN_SOURCE_DIR + "/tests/tools/read_safetensors.py " + path;
  FILE *pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe))
    out.append(buf, n);
  EXPECT_EQ(::pclose(pipe), 0) << out;
  EXPECT_EQ(out, "w F32 [2, 2] [1.0, 3.0, 2.0, 4.0]\n"
                 "h F16 [3] [0.5, -1.0, 2.0]\n"
                 "bf BF16 [1] [1.5]\n"
                 "idx I64 [3] [0, 1, 2]\n"
                 "i32 I32 [1] [-2]\n"
                 "mask BOOL [2] [true, false]\n"
                 "s F64 [] [2.5]\n"
                 "e F32 [0, 2] []\n"
                 "meta note = hello\n"
                 "kiln: format_version 1, checksums ok\n");
}

TEST(Serialize, ReadsFilesOfOtherWriters) {
  // No "kiln" entry, header not padded, tensors stored out of name order.
  TempDir dir;
  const std::string path = dir.file("foreign.safetensors");
  write_bytes(path, raw_file(R"({"b":{"dtype":"I32","shape":[],"data_offsets":[4,8]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                             std::string("\x00\x00\x80\x3f\x07\x00\x00\x00", 8)));
  LoadedTensors loaded = load(path);
  EXPECT_FALSE(loaded.verified);
  ASSERT_EQ(loaded.tensors.size(), 2u);
  EXPECT_EQ(loaded.tensors[0].first, "a"); // data order
  EXPECT_EQ(loaded.at("a").item(), 1.0);
  EXPECT_EQ(loaded.at("b").item(), 7.0);
  EXPECT_EQ(loaded.at("b").dtype(), kInt32);
}

TEST(Serialize, SaveRejectsBadInput) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  EXPECT_HAS(error_of([&] { save(path, {{"a", Tensor()}}); }), "'a' is undefined");
  EXPECT_HAS(error_of([&] { save(path, {{"a", ones({1})}, {"a", ones({1})}}); }), "two tensors are named 'a'");
  EXPECT_HAS(error_of([&] { save(path, {{"__metadata__", ones({1})}}); }), "reserved");
  EXPECT_HAS(error_of([&] { save(path, {}, {{"kiln", "x"}}); }), "reserved for Kiln");
  EXPECT_HAS(error_of([&] { save(dir.file("no/such/dir/x.safetensors"), {}); }), "no/such/dir/x.safetensors");
  EXPECT_FALSE(fs::exists(path));
}

// ---- corrupt files --------------------------------------------------------------------

class SerializeCorrupt : public ::testing::Test {
protected:
  void SetUp() override {
    path = dir.file("c.safetensors");
    save(path, {{"w", tensor({1.f, 2.f, 3.f}, {3})}, {"b", arange(2)}}, {{"epoch", "7"}});
    good = read_bytes(path);
  }
  /// load()'s error for a file of `bytes`; verify() must fail too unless only
  /// element values are wrong (it checks structure and checksums only).
  std::string load_error(const std::string &bytes, bool verify_fails = true) {
    write_bytes(path, bytes);
    std::string msg = error_of([&] { load(path); });
    EXPECT_HAS(msg, path);
    if (verify_fails)
      EXPECT_HAS(error_of([&] { verify(path); }), path);
    return msg;
  }
  TempDir dir;
  std::string path, good;
};

TEST_F(SerializeCorrupt, TruncatedFile) {
  EXPECT_HAS(load_error(good.substr(0, 5)), "too short");
  EXPECT_HAS(load_error(good.substr(0, 40)), "is truncated: the header length says");
  EXPECT_HAS(load_error(good.substr(0, good.size() - 3)), "is truncated: tensor 'b' ends at byte 28");
}

TEST_F(SerializeCorrupt, BadHeaderLength) {
  std::string bytes = good;
  std::memset(bytes.data(), 0xff, 8); // 2^64 - 1: must not be allocated
  EXPECT_HAS(load_error(bytes), "bad header length 18446744073709551615");
  bytes[7] = 0;
  bytes[6] = 0;
  EXPECT_HAS(load_error(bytes), "bad header length");
}

TEST_F(SerializeCorrupt, InvalidJson) {
  EXPECT_HAS(load_error(raw_file("{\"a\": [1,", "")), "invalid JSON header");
  EXPECT_HAS(load_error(raw_file("[1, 2, 3]   ", "")), "invalid JSON header");
  EXPECT_HAS(load_error(raw_file(R"({"a": {"dtype": "F32"}})", "")), "malformed entry for tensor 'a'");
  EXPECT_HAS(load_error(raw_file(R"({"__metadata__": {"k": 1}})", "")), "'k' that is not a string");
}

TEST_F(SerializeCorrupt, OffsetsOutOfRangeOverlappingOrWrongSize) {
  const std::string eight(8, '\0');
  EXPECT_HAS(load_error(raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight)),
             "is truncated: tensor 'a' ends at byte 16");
  EXPECT_HAS(load_error(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                 eight)),
             "overlapping tensors 'a' and 'b'");
  EXPECT_HAS(load_error(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight)),
             "gap of 4 bytes before tensor 'a'");
  EXPECT_HAS(load_error(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight)),
             "4 bytes after the last tensor");
  EXPECT_HAS(load_error(raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight)),
             "do not match its dtype F32 and shape [3] (12 bytes)");
  EXPECT_HAS(load_error(raw_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", eight)),
             "non-negative integer");
  // A shape whose byte count overflows 64 bits is refused before allocating.
  EXPECT_HAS(
      load_error(raw_file(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight)),
      "overflows");
}

TEST_F(SerializeCorrupt, UnknownOrUnsupportedDtype) {
  const std::string four(4, '\0');
  EXPECT_HAS(load_error(raw_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", four)),
             "unknown dtype 'F33'");
  EXPECT_HAS(load_error(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", four)),
             "dtype U8, which Kiln does not support");
  EXPECT_HAS(load_error(raw_file(R"({"m":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})",
                                 std::string("\x01\x02\x00\x00", 4)),
                        /*verify_fails=*/false),
             "byte value 2");
}

TEST_F(SerializeCorrupt, FlippedByteFailsTheChecksum) {
  std::string bytes = good;
  bytes[bytes.size() - 9] ^= 0x10; // inside tensor 'b' (last 16 bytes)
  EXPECT_HAS(load_error(bytes), "fails its data checksum");
  bytes = good;
  bytes[bytes.find("\"7\"") + 1] = '8'; // metadata epoch 7 -> 8
  EXPECT_HAS(load_error(bytes), "fails its header checksum");
  bytes = good;
  bytes[bytes.find("format_version\\\":1") + 17] = '9';
  EXPECT_HAS(load_error(bytes), "format_version 9; this build of Kiln reads versions 1 to 1");
}

TEST(Serialize, MissingFileAndMapLocation) {
  EXPECT_HAS(error_of([] { load("/nonexistent/kiln.safetensors"); }),
             "'/nonexistent/kiln.safetensors' cannot be opened");
  EXPECT_HAS(error_of([] { load("/nonexistent/kiln.safetensors", Device(DeviceType::CUDA, 0)); }),
             "map_location cuda:0 is not available");
}

// ---- atomic writes --------------------------------------------------------------------

TEST(Serialize, FailedWriteLeavesTheOldFile) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  save(path, {{"v", tensor({1.f}, {1})}});
  for (const char *stage : {"open", "write", "fsync", "rename"}) {
    SCOPED_TRACE(stage);
    detail::set_save_fault_hook([stage](const std::string &s) {
      if (s == stage)
        throw std::runtime_error("simulated I/O error");
    });
    EXPECT_HAS(error_of([&] { save(path, {{"v", tensor({2.f}, {1})}}); }), "simulated I/O error");
    detail::set_save_fault_hook(nullptr);
    EXPECT_EQ(load(path).at("v").item(), 1.0);
    EXPECT_EQ(dir.names(), std::vector<std::string>{"m.safetensors"}); // no temporary file left
  }
  if (::geteuid() != 0) { // root ignores directory permissions
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_HAS(error_of([&] { save(path, {{"v", tensor({3.f}, {1})}}); }), "Permission denied");
    fs::permissions(dir.path, fs::perms::owner_all);
    EXPECT_EQ(load(path).at("v").item(), 1.0);
  }
  save(path, {{"v", tensor({4.f}, {1})}});
  EXPECT_EQ(load(path).at("v").item(), 4.0);
}

// ---- checkpoints ----------------------------------------------------------------------

TEST(Serialize, RngStateReplaysBufferedWords) {
  manual_seed(5);
  rand({3}); // three words of a four-word block: one stays buffered
  RngState s = RngState::capture();
  EXPECT_EQ(s.seed, 5u);
  EXPECT_EQ(s.offset, 1u);
  EXPECT_EQ(s.buffered, 1);
  std::vector<double> a = rand({7}).to_vector<double>();
  manual_seed(99);
  s.restore();
  EXPECT_EQ(rand({7}).to_vector<double>(), a);
}

/// n AdamW steps of a Linear(3, 2) on fresh random data each step; the losses.
std::vector<double> train(nn::Linear &model, optim::Optimizer &opt, optim::lr_scheduler::StepLR &sched, int n) {
  std::vector<double> losses;
  for (int i = 0; i < n; ++i) {
    Tensor x = randn({3, 3}); // 9 normals: leaves words buffered in the generator
    Tensor y = randn({3, 2});
    opt.zero_grad();
    Tensor loss = nn::functional::mse_loss(model.forward(x), y);
    loss.backward();
    opt.step();
    sched.step();
    losses.push_back(loss.item());
  }
  return losses;
}

TEST(Serialize, CheckpointResumeIsBitIdentical) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  manual_seed(0);
  nn::Linear model(3, 2);
  optim::AdamW opt(model.parameters(), optim::AdamWOptions(0.05));
  optim::lr_scheduler::StepLR sched(opt, 2, 0.5);
  train(model, opt, sched, 3);
  save_checkpoint(path, model, &opt, &sched, /*epoch=*/1, /*step=*/3, R"({"run": "a", "best": 0.5})");
  const std::vector<double> expected = train(model, opt, sched, 4);

  manual_seed(1234);
  nn::Linear fresh(3, 2);
  optim::AdamW fresh_opt(fresh.parameters(), optim::AdamWOptions(0.05));
  optim::lr_scheduler::StepLR fresh_sched(fresh_opt, 2, 0.5);
  CheckpointLoadResult r = load_checkpoint(path, fresh, &fresh_opt, &fresh_sched);
  EXPECT_TRUE(r.optimizer_loaded);
  EXPECT_TRUE(r.scheduler_loaded);
  EXPECT_EQ(r.epoch, 1);
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.user_metadata, R"({"best":0.5,"run":"a"})");
  EXPECT_EQ(fresh_sched.last_epoch(), 3);
  const std::vector<double> resumed = train(fresh, fresh_opt, fresh_sched, 4);
  ASSERT_EQ(resumed.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(resumed[i], expected[i]) << "step " << i;
  expect_same_tensor(model.weight, fresh.weight);

  Checkpoint ckpt = read_checkpoint(path);
  EXPECT_EQ(ckpt.model.size(), 2u);
  ASSERT_TRUE(ckpt.optimizer.has_value());
  EXPECT_EQ(ckpt.optimizer->optimizer, "AdamW");
  EXPECT_EQ(ckpt.optimizer->state.size(), 6u); // step, exp_avg, exp_avg_sq for 2 params
  EXPECT_EQ(ckpt.optimizer->state.at("state.0.step").item(), 3.0);
}

struct TwoParams : nn::Module {
  TwoParams(const char *second) {
    fc = register_module("fc", std::make_shared<nn::Linear>(2, 2));
    extra = register_parameter(second, ones({2}));
  }
  Tensor forward(const Tensor &x) override { return fc->forward(x) * extra; }
  std::string name() const override { return "TwoParams"; }
  std::shared_ptr<nn::Linear> fc;
  Tensor extra;
};

TEST(Serialize, NonStrictLoadReportsKeysAndFailuresRollBack) {
  TempDir dir;
  const std::string path = dir.file("keys.safetensors");
  TwoParams saved("scale");
  saved.extra.detach().fill_(3.0);
  save_checkpoint(path, saved, nullptr, nullptr, 0, 0);

  TwoParams other("shift");
  const std::vector<double> before = other.fc->weight.to_vector<double>();
  EXPECT_HAS(error_of([&] { load_checkpoint(path, other, nullptr); }), "missing key(s): \"shift\"");
  EXPECT_EQ(other.fc->weight.to_vector<double>(), before);
  CheckpointLoadResult r = load_checkpoint(path, other, nullptr, nullptr, /*strict=*/false);
  EXPECT_EQ(r.model_keys.missing_keys, std::vector<std::string>{"shift"});
  EXPECT_EQ(r.model_keys.unexpected_keys, std::vector<std::string>{"scale"});
  EXPECT_EQ(other.fc->weight.to_vector<double>(), saved.fc->weight.to_vector<double>());

  // Asking for optimizer state the file lacks: an error (strict) or skipped.
  optim::SGD sgd(other.parameters(), optim::SGDOptions(0.1));
  EXPECT_HAS(error_of([&] { load_checkpoint(path, other, &sgd, nullptr, true); }), "holds no optimizer state");
  EXPECT_FALSE(load_checkpoint(path, other, &sgd, nullptr, false).optimizer_loaded);

  // A checkpoint of another optimizer type: the model is rolled back too.
  TwoParams same("scale");
  optim::AdamW adamw(same.parameters(), optim::AdamWOptions(0.1));
  save_checkpoint(path, saved, &adamw, nullptr, 0, 0);
  const std::vector<double> same_before = same.fc->weight.to_vector<double>();
  optim::SGD wrong(same.parameters(), optim::SGDOptions(0.1));
  std::string msg = error_of([&] { load_checkpoint(path, same, &wrong); });
  EXPECT_HAS(msg, "restoring the optimizer failed, nothing was changed");
  EXPECT_HAS(msg, "AdamW");
  EXPECT_EQ(same.fc->weight.to_vector<double>(), same_before);

  // Plain tensor files are not checkpoints.
  save(path, {{"a", ones({1})}});
  EXPECT_HAS(error_of([&] { read_checkpoint(path); }), "no kiln.checkpoint metadata");
}

// Found by the checkpoint fuzzer (tests/fuzz/corpus/checkpoint/crash-rng-buffered-4):
// an invalid RNG state failed only after the model had been restored.
TEST(Serialize, BadRngStateFailsBeforeAnythingIsRestored) {
  TempDir dir;
  const std::string path = dir.file("rng.safetensors");
  nn::Linear saved(2, 2);
  saved.weight.detach().fill_(5.0);
  Checkpoint ckpt = make_checkpoint(saved, nullptr, nullptr, 0, 0);
  ckpt.rng.buffered = 4; // restore() accepts 0..3
  save_checkpoint(path, ckpt);
  nn::Linear model(2, 2);
  model.weight.detach().fill_(1.0);
  std::string msg = error_of([&] { load_checkpoint(path, model, nullptr); });
  EXPECT_HAS(msg, "'buffered' is 4; expected an integer in [0, 3]");
  EXPECT_HAS(msg, path);
  EXPECT_EQ(model.weight.to_vector<double>(), std::vector<double>(4, 1.0));
  // Numbers that do not fit their field are refused, not cast.
  ckpt.rng.buffered = 0;
  save_checkpoint(path, ckpt);
  LoadedTensors file = load(path);
  std::string json = file.checkpoint_json;
  const std::string epoch = "\"epoch\":0";
  ASSERT_NE(json.find(epoch), std::string::npos) << json;
  json.replace(json.find(epoch), epoch.size(), "\"epoch\":1e300");
  detail::save_with_kiln_metadata(path, file.tensors, {{"kiln.checkpoint", json}});
  EXPECT_HAS(error_of([&] { read_checkpoint(path); }), "'epoch' is 1e+300; expected an integer");
}

// nlohmann's dump() recurses per level: a header of 200k '[' overflowed the
// stack in load() (found with the safetensors fuzzer's deep-nesting input).
TEST(Serialize, DeeplyNestedJsonIsRefusedNotRecursedInto) {
  TempDir dir;
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  write_bytes(dir.file("deep.safetensors"), raw_file("{\"a\":" + deep + "}", ""));
  EXPECT_HAS(error_of([&] { load(dir.file("deep.safetensors")); }), "nested deeper than 64 levels");
  write_bytes(dir.file("meta.safetensors"), raw_file("{\"__metadata__\":{\"k\":" + deep + "}}", ""));
  EXPECT_HAS(error_of([&] { verify(dir.file("meta.safetensors")); }), "nested deeper than 64 levels");
  // user_metadata: 63 levels save and load; 64 are refused when saving.
  nn::Linear model(1, 1);
  const std::string ok = std::string(63, '[') + std::string(63, ']');
  save_checkpoint(dir.file("ok.safetensors"), model, nullptr, nullptr, 0, 0, ok);
  EXPECT_EQ(read_checkpoint(dir.file("ok.safetensors")).user_metadata, ok);
  const std::string too_deep = "[" + ok + "]";
  EXPECT_HAS(error_of([&] { save_checkpoint(dir.file("no.safetensors"), model, nullptr, nullptr, 0, 0, too_deep); }),
             "nested deeper than 63 levels");
}

TEST(CheckpointManager, KeepsTheLastThree) {
  TempDir dir;
  write_bytes(dir.file("notes.txt"), "keep me");
  CheckpointManager mgr(dir.path + "/run");
  EXPECT_EQ(mgr.latest(), std::nullopt);
  nn::Linear model(2, 2);
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.1).momentum(0.9));
  for (int64_t step = 1; step <= 5; ++step) {
    model.weight.detach().fill_(static_cast<double>(step));
    EXPECT_EQ(mgr.save(step * 10, model, &opt, nullptr, /*epoch=*/step), mgr.path_for(step * 10));
  }
  EXPECT_EQ(mgr.list(), (std::vector<std::string>{mgr.path_for(30), mgr.path_for(40), mgr.path_for(50)}));
  EXPECT_EQ(mgr.latest(), mgr.path_for(50));
  EXPECT_TRUE(fs::exists(dir.file("notes.txt")));
  Checkpoint last = read_checkpoint(*mgr.latest());
  EXPECT_EQ(last.step, 50);
  EXPECT_EQ(last.epoch, 5);

  // A damaged newest checkpoint is skipped; a truncated one too.
  std::string bytes = read_bytes(mgr.path_for(50));
  bytes[bytes.size() - 1] ^= 1;
  write_bytes(mgr.path_for(50), bytes);
  EXPECT_EQ(mgr.latest(), mgr.path_for(40));
  write_bytes(mgr.path_for(40), read_bytes(mgr.path_for(40)).substr(0, 100));
  EXPECT_EQ(mgr.latest(), mgr.path_for(30));

  EXPECT_HAS(error_of([&] { CheckpointManager(dir.path, 0); }), "keep_last must be at least 1");
  EXPECT_HAS(error_of([&] { CheckpointManager(dir.file("notes.txt")); }), "cannot create directory");
  EXPECT_HAS(error_of([&] { mgr.save(-1, model, nullptr, nullptr, 0); }), "non-negative");
}

} // namespace
} // namespace kiln
