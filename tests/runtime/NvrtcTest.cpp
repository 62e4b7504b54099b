// kiln-cuda-loader-tests: the NVRTC compile service (Nvrtc.h): CUBIN and PTX,
// ptxas' resource report, compile errors, the memory and disk caches, batch
// compiles and determinism. NVRTC needs no GPU; the last test launches the
// compiled kernel on a real device when there is one.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <regex>

#include "Check.h"
#include "Sha256.h"
#include "kiln/runtime/cuda/Availability.h"
#include "kiln/runtime/cuda/CudaError.h"
#include "kiln/runtime/cuda/Nvrtc.h"

namespace cuda = kiln::runtime::cuda;
namespace fs = std::filesystem;

namespace {

const char *kPointwise =
    R"(extern "C" __global__ void add_one(const float *__restrict__ x, float *__restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = x[i] + 1.0f;
}
)";

// One block per row: a warp shuffle tree, then 32 partial sums in shared memory.
const char *kBlockSum =
    R"(extern "C" __global__ void block_sum(const float *__restrict__ x, float *__restrict__ out, int n) {
  __shared__ float partial[32];
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    v += x[blockIdx.x * n + i];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0)
    partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1)
      v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0)
      out[blockIdx.x] = v;
  }
}
)";

// NVRTC 13.0's log for three kernels with -Xptxas=-v, captured on the
// development machine: `spill` with --maxrregcount=16 (raised to 24), and
// `uses_helper` calling a __noinline__ helper whose own properties block
// follows the kernel's and must not overwrite it.
const char *kCapturedPtxasLog =
    R"(ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24
ptxas info    : Overriding maximum register limit 256 for 'spill' with  24 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
ptxas         .     208 bytes stack frame, 148 bytes spill stores, 184 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 208 bytes cumulative stack size
ptxas info    : Compile time = 31.502 ms
ptxas info    : Compiling entry function 'block_sum' for 'sm_90'
ptxas info    : Function properties for block_sum
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 13 registers, used 1 barriers, 128 bytes smem
ptxas info    : Compile time = 16.668 ms
ptxas info    : Compiling entry function 'uses_helper' for 'sm_90'
ptxas info    : Function properties for uses_helper
ptxas         .     64 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 27 registers, used 1 barriers, 64 bytes cumulative stack size, 256 bytes smem
ptxas info    : Compile time = 24.435 ms
ptxas info    : Function properties for _Z6helperfi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
)";

/// A fresh cache folder per test, removed afterwards.
class Nvrtc : public ::testing::Test {
protected:
  void SetUp() override {
    if (!cuda::nvrtc_available())
      GTEST_SKIP() << "skipped: " << cuda::nvrtc_unavailable_reason();
    std::string pattern = (fs::temp_directory_path() / "kiln-nvrtc-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty())
      fs::remove_all(dir_);
  }
  cuda::NvrtcCompilerOptions cached() const { return cuda::NvrtcCompilerOptions{dir_, {}}; }
  static cuda::NvrtcCompilerOptions uncached() { return cuda::NvrtcCompilerOptions{std::string(), {}}; }

  std::string dir_;
};

bool contains(const std::string &text, const std::string &part) { return text.find(part) != std::string::npos; }

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

/// Source i of a batch: a distinct kernel `scale_<i>` multiplying by i + 1.
cuda::KernelSource scale_kernel(int i) {
  std::string name = "scale_" + std::to_string(i);
  std::string code = "extern \"C\" __global__ void " + name +
                     "(float *x, int n) {\n"
                     "  int j = blockIdx.x * blockDim.x + threadIdx.x;\n"
                     "  if (j < n)\n    x[j] *= " +
                     std::to_string(i + 1) + ".0f;\n}\n";
  return cuda::KernelSource{code, {name}};
}

} // namespace

TEST(PtxasLog, ParsesTheCapturedNvrtc13Report) {
  std::vector<cuda::KernelResources> kernels = cuda::parse_ptxas_log(kCapturedPtxasLog);
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(kernels[0].name, "spill");
  EXPECT_EQ(kernels[0].registers, 24);
  EXPECT_EQ(kernels[0].stack_frame_bytes, 208);
  EXPECT_EQ(kernels[0].spill_store_bytes, 148);
  EXPECT_EQ(kernels[0].spill_load_bytes, 184);
  EXPECT_EQ(kernels[0].shared_bytes, 0);
  EXPECT_EQ(kernels[1].name, "block_sum");
  EXPECT_EQ(kernels[1].registers, 13);
  EXPECT_EQ(kernels[1].barriers, 1);
  EXPECT_EQ(kernels[1].shared_bytes, 128); // float partial[32]
  EXPECT_EQ(kernels[2].name, "uses_helper");
  EXPECT_EQ(kernels[2].registers, 27);
  EXPECT_EQ(kernels[2].stack_frame_bytes, 64); // not the helper's 0
  EXPECT_EQ(kernels[2].shared_bytes, 256);
}

/// parse_arch_name inverts CompileTarget::arch_name and refuses other names
/// (artifact sections and ExportOptions::cuda_archs are read with it).
TEST(CompileTarget, ArchNamesParseBackToTheirTarget) {
  using cuda::BinaryKind, cuda::CompileTarget, cuda::parse_arch_name;
  for (const CompileTarget &t : {CompileTarget{BinaryKind::Cubin, 90}, CompileTarget{BinaryKind::Ptx, 121}}) {
    const std::optional<CompileTarget> back = parse_arch_name(t.arch_name());
    ASSERT_TRUE(back) << t.arch_name();
    EXPECT_EQ(back->kind, t.kind);
    EXPECT_EQ(back->arch, t.arch);
  }
  for (const char *bad : {"", "sm_", "compute_", "sm_9a", "sm_12345", "gfx90", "SM_90", "sm90", "compute_-1"})
    EXPECT_FALSE(parse_arch_name(bad)) << bad;
}

TEST_F(Nvrtc, SupportsSm90AndReportsVersion13) {
  std::vector<int> archs = cuda::nvrtc_supported_archs();
  EXPECT_TRUE(std::binary_search(archs.begin(), archs.end(), 90));
  EXPECT_EQ(cuda::nvrtc_version().major, 13);
  cuda::CompileTarget target = cuda::choose_compile_target(90);
  EXPECT_EQ(target.kind, cuda::BinaryKind::Cubin);
  EXPECT_EQ(target.arch_name(), "sm_90");
}

TEST_F(Nvrtc, PointwiseKernelGivesAnSm90CubinWithoutSpills) {
  cuda::NvrtcCompiler compiler(uncached());
  cuda::CompiledModule module = compiler.compile({kPointwise, {"add_one"}}, 90);
  EXPECT_EQ(module.target.kind, cuda::BinaryKind::Cubin);
  ASSERT_GT(module.binary.size(), 4u);
  EXPECT_EQ(module.binary.substr(0, 4), "\x7f"
                                        "ELF");
  const cuda::KernelResources *kernel = module.kernel("add_one");
  ASSERT_NE(kernel, nullptr) << module.log;
  EXPECT_GT(kernel->registers, 0);
  EXPECT_EQ(kernel->spill_store_bytes, 0);
  EXPECT_EQ(kernel->spill_load_bytes, 0);
  EXPECT_GT(module.compile_seconds, 0);
}

TEST_F(Nvrtc, BlockReductionUsesSharedMemoryAndABarrierWithoutSpills) {
  cuda::NvrtcCompiler compiler(uncached());
  cuda::CompiledModule module = compiler.compile({kBlockSum, {"block_sum"}}, 90);
  EXPECT_GT(module.binary.size(), 0u);
  const cuda::KernelResources *kernel = module.kernel("block_sum");
  ASSERT_NE(kernel, nullptr) << module.log;
  EXPECT_GT(kernel->registers, 0);
  EXPECT_EQ(kernel->shared_bytes, 32 * 4); // __shared__ float partial[32]
  EXPECT_GE(kernel->barriers, 1);          // __syncthreads
  EXPECT_EQ(kernel->spill_store_bytes + kernel->spill_load_bytes, 0);
}

TEST_F(Nvrtc, SyntaxErrorNamesTheLineAndKeepsTheLog) {
  cuda::NvrtcCompiler compiler(uncached());
  const char *bad = "extern \"C\" __global__ void k(float *x) {\n  x[0] = 1.0f;\n  int y = ;\n}\n";
  try {
    compiler.compile({bad, {"k"}}, 90);
    FAIL() << "a syntax error compiled";
  } catch (const cuda::CudaError &error) {
    std::string message = error.what();
    EXPECT_TRUE(contains(message, "NVRTC could not compile kiln_kernels.cu for sm_90 at line 3: `  int y = ;`"))
        << message;
    EXPECT_TRUE(contains(message, "NVRTC_ERROR_COMPILATION")) << message;
    EXPECT_TRUE(contains(message, "kiln_kernels.cu(3): error: expected an expression")) << message;
    EXPECT_EQ(error.api(), "nvrtcCompileProgram");
  }
}

TEST_F(Nvrtc, AKernelThatIsNotInTheModuleIsAnError) {
  cuda::NvrtcCompiler compiler(uncached());
  try {
    compiler.compile({kPointwise, {"add_two"}}, 90);
    FAIL();
  } catch (const cuda::CudaError &error) {
    EXPECT_TRUE(contains(error.what(), "has no kernel 'add_two': declare it extern \"C\" __global__")) << error.what();
  }
}

TEST_F(Nvrtc, ToolkitHeadersAreNotFoundWithoutAnIncludePath) {
  // Kiln passes no include path: a kernel that includes a toolkit header
  // fails as it would on a machine with only the driver and libnvrtc.
  cuda::NvrtcCompiler compiler(uncached());
  EXPECT_THROW(compiler.compile({"#include <cuda_fp16.h>\n" + std::string(kPointwise), {"add_one"}}, 90),
               cuda::CudaError);
}

TEST_F(Nvrtc, ArchNewerThanNvrtcKnowsGivesPtxForTheNewestKnown) {
  std::vector<int> archs = cuda::nvrtc_supported_archs();
  int newest = archs.back();
  cuda::NvrtcCompiler compiler(uncached());
  cuda::CompiledModule module = compiler.compile({kPointwise, {"add_one"}}, newest + 10);
  EXPECT_EQ(module.target.kind, cuda::BinaryKind::Ptx);
  EXPECT_EQ(module.target.arch, newest);
  EXPECT_TRUE(contains(module.binary, ".target sm_" + std::to_string(newest))) << module.binary.substr(0, 400);
  EXPECT_TRUE(contains(module.binary, ".entry add_one("));
  EXPECT_TRUE(module.kernels.empty()); // no ptxas run for PTX
}

TEST_F(Nvrtc, ArchOlderThanNvrtcSupportsIsAnError) {
  try {
    cuda::choose_compile_target(70);
    FAIL();
  } catch (const cuda::CudaError &error) {
    EXPECT_TRUE(contains(error.what(), "cannot compile for sm_70: it supports sm_75 to sm_")) << error.what();
  }
}

TEST_F(Nvrtc, SameSourceGivesTheSameBytesTwice) {
  cuda::NvrtcCompiler first(uncached()), second(uncached());
  std::string a = first.compile({kBlockSum, {"block_sum"}}, 90).binary;
  std::string b = second.compile({kBlockSum, {"block_sum"}}, 90).binary;
  EXPECT_TRUE(a == b) << a.size() << " vs " << b.size() << " bytes";
  // The stored log drops ptxas' timing lines, so whole entries repeat too.
  EXPECT_FALSE(contains(first.compile({kBlockSum, {"block_sum"}}, 90).log, "Compile time"));
}

TEST_F(Nvrtc, SecondCompilerHitsTheDiskCacheWithIdenticalBytes) {
  cuda::KernelSource source{kPointwise, {"add_one"}};
  cuda::NvrtcCompiler first(cached());
  cuda::CompiledModule compiled = first.compile(source, 90);
  EXPECT_EQ(compiled.cache, cuda::CacheOutcome::Miss);
  EXPECT_EQ(first.compile(source, 90).cache, cuda::CacheOutcome::MemoryHit);
  EXPECT_EQ(first.stats().misses, 1);
  EXPECT_EQ(first.stats().memory_hits, 1);
  EXPECT_EQ(first.stats().stores, 1);

  cuda::NvrtcCompiler second(cached()); // fresh memory cache, same folder
  cuda::CompiledModule hit = second.compile(source, 90);
  EXPECT_EQ(hit.cache, cuda::CacheOutcome::DiskHit);
  EXPECT_TRUE(hit.binary == compiled.binary);
  EXPECT_EQ(hit.cache_key, compiled.cache_key);
  ASSERT_NE(hit.kernel("add_one"), nullptr); // resources come back from the stored log
  EXPECT_EQ(hit.kernel("add_one")->registers, compiled.kernel("add_one")->registers);
  EXPECT_EQ(second.stats().disk_hits, 1);
  EXPECT_EQ(second.stats().misses, 0);
  EXPECT_EQ(hit.compile_seconds, 0);
}

TEST_F(Nvrtc, CacheFileNameSaysWhatItDependsOn) {
  cuda::NvrtcCompiler compiler(cached());
  cuda::KernelSource source{kPointwise, {"add_one"}};
  std::string path = compiler.cache_path(source, 90);
  cuda::NvrtcVersion v = cuda::nvrtc_version();
  std::regex expected(".*/kernel_[0-9a-f]{24}_sm90_nvrtc" + std::to_string(v.major) + "\\." + std::to_string(v.minor) +
                      "\\.cubin");
  EXPECT_TRUE(std::regex_match(path, expected)) << path;
  compiler.compile(source, 90);
  EXPECT_TRUE(fs::exists(path));
  for (const auto &entry : fs::directory_iterator(dir_)) // no temporary file left behind
    EXPECT_EQ(entry.path().string(), path);
  // Another option is another key, so another entry.
  cuda::NvrtcCompiler other(cuda::NvrtcCompilerOptions{dir_, {"-lineinfo"}});
  EXPECT_NE(other.cache_path(source, 90), path);
}

TEST_F(Nvrtc, CorruptedOrTruncatedEntryIsRecompiledNotTrusted) {
  cuda::KernelSource source{kBlockSum, {"block_sum"}};
  cuda::NvrtcCompiler first(cached());
  std::string good = first.compile(source, 90).binary;
  std::string path = first.cache_path(source, 90);
  std::string entry = read_file(path);

  std::string flipped = entry;
  flipped[entry.size() / 2] ^= 0x40; // a byte inside the CUBIN
  write_file(path, flipped);
  cuda::NvrtcCompiler second(cached());
  cuda::CompiledModule recompiled = second.compile(source, 90);
  EXPECT_EQ(recompiled.cache, cuda::CacheOutcome::Miss);
  EXPECT_TRUE(recompiled.binary == good);
  EXPECT_EQ(second.stats().bad_entries, 1);
  EXPECT_TRUE(read_file(path) == entry); // overwritten with the same good entry

  write_file(path, entry.substr(0, entry.size() - 100)); // truncated
  cuda::NvrtcCompiler third(cached());
  EXPECT_EQ(third.compile(source, 90).cache, cuda::CacheOutcome::Miss);
  EXPECT_EQ(third.stats().bad_entries, 1);

  cuda::NvrtcCompiler fourth(cached()); // the rewritten entry is good again
  EXPECT_EQ(fourth.compile(source, 90).cache, cuda::CacheOutcome::DiskHit);
}

TEST_F(Nvrtc, UnwritableCacheFolderNeverFailsACompile) {
  std::string blocker = dir_ + "/file";
  write_file(blocker, "not a folder");
  cuda::NvrtcCompiler compiler(cuda::NvrtcCompilerOptions{blocker + "/cache", {}});
  EXPECT_GT(compiler.compile({kPointwise, {"add_one"}}, 90).binary.size(), 0u);
  EXPECT_EQ(compiler.stats().store_failures, 1);
  EXPECT_EQ(compiler.stats().stores, 0);
}

TEST_F(Nvrtc, BatchOfEightOnTwoThreadsMatchesSerialInInputOrder) {
  std::vector<cuda::KernelSource> sources;
  for (int i = 0; i < 8; ++i)
    sources.push_back(scale_kernel(i));
  cuda::NvrtcCompiler serial(uncached()), batch(uncached());
  std::vector<cuda::CompiledModule> parallel = batch.compile_batch(sources, 90, 2);
  ASSERT_EQ(parallel.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    cuda::CompiledModule one = serial.compile(sources[i], 90);
    EXPECT_TRUE(parallel[i].binary == one.binary) << "kernel " << i;
    EXPECT_NE(parallel[i].kernel("scale_" + std::to_string(i)), nullptr) << "kernel " << i;
  }
  EXPECT_EQ(batch.stats().misses, 8);
}

TEST_F(Nvrtc, BatchRethrowsTheFirstFailureInInputOrder) {
  std::vector<cuda::KernelSource> sources = {
      scale_kernel(0), {"syntax error here", {"k1"}}, scale_kernel(2), {"another ( error", {"k3"}}};
  cuda::NvrtcCompiler compiler(uncached());
  try {
    compiler.compile_batch(sources, 90, 2);
    FAIL();
  } catch (const cuda::CudaError &error) {
    EXPECT_TRUE(contains(error.what(), "line 1: `syntax error here`")) << error.what();
  }
}

TEST_F(Nvrtc, DefaultCacheFolderIsTheKernelCachesChoice) {
  const char *saved = std::getenv("KILN_CACHE_DIR");
  std::string saved_value = saved ? saved : "";
  const char *saved_xdg = std::getenv("XDG_CACHE_HOME");
  std::string saved_xdg_value = saved_xdg ? saved_xdg : "";
  setenv("KILN_CACHE_DIR", dir_.c_str(), 1);
  EXPECT_EQ(cuda::default_kernel_cache_dir(), dir_);
  EXPECT_EQ(cuda::NvrtcCompiler().cache_dir(), dir_);
  setenv("KILN_DISABLE_CACHE", "1", 1);
  EXPECT_EQ(cuda::default_kernel_cache_dir(), "");
  unsetenv("KILN_DISABLE_CACHE");
  unsetenv("KILN_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/kiln-xdg", 1);
  EXPECT_EQ(cuda::default_kernel_cache_dir(), "/tmp/kiln-xdg/kiln/kernels");
  unsetenv("XDG_CACHE_HOME");
  if (saved)
    setenv("KILN_CACHE_DIR", saved_value.c_str(), 1);
  if (saved_xdg)
    setenv("XDG_CACHE_HOME", saved_xdg_value.c_str(), 1);
}

TEST_F(Nvrtc, ProcessCountersSumEveryCompiler) {
  cuda::NvrtcCacheStats before = cuda::nvrtc_process_stats();
  cuda::NvrtcCompiler compiler(uncached());
  compiler.compile(scale_kernel(41), 90);
  cuda::NvrtcCacheStats after = cuda::nvrtc_process_stats();
  EXPECT_EQ(after.misses, before.misses + 1);
  EXPECT_GT(after.compile_seconds, before.compile_seconds);
}

// FIPS 180-2 appendix B test vectors (one block, empty, two blocks).
TEST(Sha256, MatchesTheFipsTestVectors) {
  auto hex = [](const std::string &text) {
    cuda::Sha256 sha;
    sha.update(text);
    return sha.hex_digest();
  };
  EXPECT_EQ(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  cuda::Sha256 pieces; // fed in pieces across a block boundary: the same digest
  std::string million(1000000, 'a');
  for (size_t at = 0; at < million.size(); at += 777)
    pieces.update(million.data() + at, std::min<size_t>(777, million.size() - at));
  EXPECT_EQ(pieces.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_F(Nvrtc, AnSmBetweenKnownOnesGivesPtxForTheOneBelow) {
  cuda::CompileTarget target = cuda::choose_compile_target(91); // no sm_91: NVRTC 13 knows 90 and 100
  EXPECT_EQ(target.kind, cuda::BinaryKind::Ptx);
  EXPECT_EQ(target.arch_name(), "compute_90");
}

TEST_F(Nvrtc, AnotherKeysEntryCopiedInPlaceIsRejected) {
  cuda::KernelSource a{kPointwise, {"add_one"}}, b = scale_kernel(3);
  cuda::NvrtcCompiler first(cached());
  first.compile(a, 90);
  fs::copy_file(first.cache_path(a, 90), first.cache_path(b, 90)); // b's name, a's bytes
  cuda::NvrtcCompiler second(cached());
  cuda::CompiledModule module = second.compile(b, 90);
  EXPECT_EQ(module.cache, cuda::CacheOutcome::Miss);
  EXPECT_EQ(second.stats().bad_entries, 1);
  EXPECT_NE(module.kernel("scale_3"), nullptr);
}
