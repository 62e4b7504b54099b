// The on-disk kernel cache (codegen/DESIGN.md, "Kernel cache"): a second
// compile of the same graph, in this process or in a child process, links the
// cached object without MLIR lowering or LLVM; bad entries fall back to a
// compile and are overwritten; the key follows the IR. Every test uses its
// own temporary KILN_CACHE_DIR.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "kiln/codegen/Compiler.h"
#include "kiln/runtime/LaunchExecutable.h"
#include "GraphTestUtils.h"

using namespace kiln;
using kiln::ir::OpKind;
namespace fs = std::filesystem;

namespace {

using Shape = std::vector<int64_t>;

/// Sets (or unsets) an environment variable for the scope of the object.
class ScopedEnv {
public:
  ScopedEnv(const char *name, std::optional<std::string> value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

/// y = exp(x * w - x) (one elementwise kernel) and s = sum(y * w, 1) (a
/// reduction kernel), [R, 7]; `sub` swaps the first op to give other IR.
ir::Graph makeGraph(int64_t rows = 5, bool sub = false, int64_t cols = 7) {
  codegen_test::GraphMaker m;
  const Shape shape = {rows, cols};
  int x = m.input(shape), w = m.input(shape);
  int y = m.same(OpKind::Exp, {m.same(OpKind::Sub, {m.same(sub ? OpKind::Add : OpKind::Mul, {x, w}), x})});
  int s = m.reduce(OpKind::ReduceSum, m.same(OpKind::Mul, {y, w}), {1}, {rows});
  return m.done({y, s});
}

/// Runs a compiled makeGraph(rows) and checks both outputs against C++.
void checkRuns(const codegen::CompiledGraph &compiled, int64_t rows = 5, int64_t cols = 7) {
  ASSERT_TRUE(compiled.forward);
  using codegen_test::f32;
  std::vector<float> xs = codegen_test::values(rows * cols, 1), ws = codegen_test::values(rows * cols, 2);
  auto out = codegen_test::runOk(*compiled.forward, {f32({rows, cols}, xs), f32({rows, cols}, ws)});
  ASSERT_EQ(out.size(), 2u);
  std::vector<float> y = codegen_test::read<float>(out[0]), s = codegen_test::read<float>(out[1]);
  ASSERT_EQ(y.size(), static_cast<size_t>(rows * cols));
  ASSERT_EQ(s.size(), static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const float want = std::exp(xs[i] * ws[i] - xs[i]);
      EXPECT_NEAR(y[i], want, 1e-5f * std::max(1.0f, std::fabs(want))) << i;
      sum += want * ws[i];
    }
    EXPECT_NEAR(s[r], sum, 1e-4f * std::max(1.0f, std::fabs(sum))) << r;
  }
}

codegen::CompiledGraph compileOk(const ir::Graph &graph, const codegen::CompileOptions &options = {}) {
  codegen::CompiledGraph compiled;
  std::string error;
  EXPECT_TRUE(codegen::compileGraph(graph, options, &compiled, &error)) << error;
  return compiled;
}

std::vector<fs::path> entries(const fs::path &dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir))
    return out;
  for (const auto &e : fs::directory_iterator(dir))
    out.push_back(e.path());
  return out;
}

/// A fresh KILN_CACHE_DIR for each test; KILN_DISABLE_CACHE unset.
class codegen_KernelCache : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kiln-kernel-cache-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = fs::path(tmpl) / "kernels"; // not created yet: the cache creates it
    cacheDir_.emplace("KILN_CACHE_DIR", dir_.string());
    disable_.emplace("KILN_DISABLE_CACHE", std::nullopt);
  }
  void TearDown() override {
    cacheDir_.reset();
    disable_.reset();
    std::error_code ec;
    fs::remove_all(dir_.parent_path(), ec);
  }
  fs::path entryPath(const std::string &key) const { return dir_ / (key + ".o"); }

  fs::path dir_;
  std::optional<ScopedEnv> cacheDir_, disable_;
};

} // namespace

TEST_F(codegen_KernelCache, SecondCompileInProcessSkipsLLVM) {
  const ir::Graph graph = makeGraph();
  const codegen::KernelCacheStats before = codegen::kernelCacheStats();
  auto cold = compileOk(graph);
  EXPECT_FALSE(cold.kernel_cache_hit);
  ASSERT_EQ(cold.kernel_cache_key.size(), 64u);
  EXPECT_GT(cold.llvm_seconds, 0.0);
  EXPECT_TRUE(fs::exists(entryPath(cold.kernel_cache_key)));
  EXPECT_EQ(entries(dir_).size(), 1u) << "no temp file left behind";
  const codegen::KernelCacheStats mid = codegen::kernelCacheStats();
  EXPECT_EQ(mid.stores, before.stores + 1);
  EXPECT_EQ(mid.llvm_compiles, before.llvm_compiles + 1);
  checkRuns(cold);

  auto warm = compileOk(graph);
  EXPECT_TRUE(warm.kernel_cache_hit);
  EXPECT_EQ(warm.kernel_cache_key, cold.kernel_cache_key);
  EXPECT_EQ(warm.llvm_seconds, 0.0);
  EXPECT_EQ(warm.mlir_lowering_seconds, 0.0);
  const codegen::KernelCacheStats after = codegen::kernelCacheStats();
  EXPECT_EQ(after.hits, mid.hits + 1);
  EXPECT_EQ(after.llvm_compiles, mid.llvm_compiles) << "a hit must not run LLVM";
  EXPECT_EQ(after.mlir_lowerings, mid.mlir_lowerings) << "a hit must not lower to LLVM";
  EXPECT_EQ(warm.fusions.size(), cold.fusions.size());
  checkRuns(warm);
  printf("[ info ] compile cold %.1f ms (lowering %.1f, LLVM %.1f), warm %.1f ms (cache load %.1f)\n",
         cold.compile_seconds * 1e3, cold.mlir_lowering_seconds * 1e3, cold.llvm_seconds * 1e3,
         warm.compile_seconds * 1e3, warm.cache_load_seconds * 1e3);
}

// Runs only when started by ChildProcessHitsTheCache (not a fixture test: it
// uses the KILN_CACHE_DIR it inherits).
TEST(codegen_KernelCacheChild, ChildSide) {
  const char *marker = std::getenv("KILN_CACHE_TEST_CHILD_MARKER");
  if (!marker)
    GTEST_SKIP() << "runs as the child of ChildProcessHitsTheCache";
  auto compiled = compileOk(makeGraph());
  EXPECT_TRUE(compiled.kernel_cache_hit);
  const codegen::KernelCacheStats stats = codegen::kernelCacheStats();
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.llvm_compiles, 0) << "the child must not run LLVM";
  EXPECT_EQ(stats.mlir_lowerings, 0) << "the child must not lower to LLVM";
  checkRuns(compiled);
  if (!HasFailure())
    std::ofstream(marker) << "ok\n";
}

TEST_F(codegen_KernelCache, ChildProcessHitsTheCache) {
  auto cold = compileOk(makeGraph());
  ASSERT_FALSE(cold.kernel_cache_hit);
  ASSERT_TRUE(fs::exists(entryPath(cold.kernel_cache_key)));

  // This test binary again, in a new process, running only ChildSide; it
  // inherits KILN_CACHE_DIR and writes the marker if all its checks passed.
  const std::string marker = (dir_.parent_path() / "child-ok").string();
  EXPECT_EQ(codegen_test::runThisTestInChild("codegen_KernelCacheChild.ChildSide",
                                             {{"KILN_CACHE_TEST_CHILD_MARKER", marker}}),
            0);
  EXPECT_TRUE(fs::exists(marker)) << "the child did not run or did not hit the cache";
}

TEST_F(codegen_KernelCache, BadEntriesFallBackAndAreOverwritten) {
  const ir::Graph graph = makeGraph();
  auto cold = compileOk(graph);
  const fs::path entry = entryPath(cold.kernel_cache_key);
  ASSERT_TRUE(fs::exists(entry));
  std::string good;
  {
    std::ifstream in(entry, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(good.size(), 48u);
  EXPECT_EQ(good.substr(0, 4), "\x7f" "ELF");

  // The entry of another graph (valid object, valid trailer for its key).
  auto other = compileOk(makeGraph(5, /*sub=*/true));
  std::string otherEntry;
  {
    std::ifstream in(entryPath(other.kernel_cache_key), std::ios::binary);
    otherEntry.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::string flipped = good;
  flipped[flipped.size() / 3] ^= 0x5a;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"garbage", std::string(4096, '\x42')},
      {"truncated", good.substr(0, good.size() / 2)},
      {"one byte flipped", flipped},
      {"no trailer", good.substr(0, good.size() - 48)},
      {"another key's entry", otherEntry},
  };
  for (const auto &[what, bytes] : cases) {
    SCOPED_TRACE(what);
    std::ofstream(entry, std::ios::binary | std::ios::trunc) << bytes;
    const codegen::KernelCacheStats before = codegen::kernelCacheStats();
    auto again = compileOk(graph);
    EXPECT_FALSE(again.kernel_cache_hit);
    const codegen::KernelCacheStats after = codegen::kernelCacheStats();
    EXPECT_EQ(after.bad_entries, before.bad_entries + 1);
    EXPECT_EQ(after.llvm_compiles, before.llvm_compiles + 1);
    EXPECT_EQ(after.stores, before.stores + 1) << "the bad entry is overwritten";
    checkRuns(again);
    // The rewritten entry is good again.
    auto warm = compileOk(graph);
    EXPECT_TRUE(warm.kernel_cache_hit);
    checkRuns(warm);
  }

  // An unreadable entry (a directory in its place) and an unwritable cache
  // directory: the compile still succeeds.
  fs::remove(entry);
  fs::create_directory(entry);
  auto blocked = compileOk(graph);
  EXPECT_FALSE(blocked.kernel_cache_hit);
  checkRuns(blocked);
  fs::remove(entry);
  {
    ScopedEnv notADir("KILN_CACHE_DIR", (dir_.parent_path() / "child-ok-file").string());
    std::ofstream(dir_.parent_path() / "child-ok-file") << "a file, not a directory";
    const codegen::KernelCacheStats before = codegen::kernelCacheStats();
    auto nowhere = compileOk(graph);
    EXPECT_FALSE(nowhere.kernel_cache_hit);
    EXPECT_EQ(codegen::kernelCacheStats().store_failures, before.store_failures + 1);
    checkRuns(nowhere);
  }
}

TEST_F(codegen_KernelCache, KeyFollowsTheIR) {
  auto a = compileOk(makeGraph(5));
  auto a2 = compileOk(makeGraph(5));
  auto b = compileOk(makeGraph(5, /*sub=*/true)); // add instead of mul
  auto c = compileOk(makeGraph(5, false, 8));     // another row length
  // Another number of rows: the kernels are row-split (dim 0 is `?` in
  // their memrefs, codegen::cpu::isRowSplittable), so the kernel module and
  // its key are the same, and the cached object serves 6 rows.
  auto d = compileOk(makeGraph(6));
  ASSERT_EQ(a.kernel_cache_key.size(), 64u);
  EXPECT_EQ(a.kernel_cache_key, a2.kernel_cache_key);
  EXPECT_NE(a.kernel_cache_key, b.kernel_cache_key);
  EXPECT_NE(a.kernel_cache_key, c.kernel_cache_key);
  EXPECT_NE(b.kernel_cache_key, c.kernel_cache_key);
  EXPECT_EQ(a.kernel_cache_key, d.kernel_cache_key);
  EXPECT_FALSE(b.kernel_cache_hit);
  EXPECT_FALSE(c.kernel_cache_hit);
  EXPECT_TRUE(d.kernel_cache_hit);
  EXPECT_EQ(entries(dir_).size(), 3u);
  checkRuns(c, 5, 8);
  checkRuns(d, 6);
}

TEST_F(codegen_KernelCache, DisabledByEnvironmentOrOption) {
  const ir::Graph graph = makeGraph();
  {
    ScopedEnv off("KILN_DISABLE_CACHE", "1");
    auto first = compileOk(graph), second = compileOk(graph);
    EXPECT_FALSE(second.kernel_cache_hit);
    EXPECT_TRUE(second.kernel_cache_key.empty());
    checkRuns(second);
  }
  {
    ScopedEnv empty("KILN_CACHE_DIR", "");
    EXPECT_EQ(codegen::resolveKernelCacheDir({}), "");
    auto first = compileOk(graph), second = compileOk(graph);
    EXPECT_FALSE(second.kernel_cache_hit);
  }
  {
    codegen::CompileOptions options;
    options.kernel_cache_dir = "";
    auto first = compileOk(graph, options), second = compileOk(graph, options);
    EXPECT_FALSE(second.kernel_cache_hit);
  }
  EXPECT_TRUE(entries(dir_).empty());
  {
    ScopedEnv noDir("KILN_CACHE_DIR", std::nullopt);
    ScopedEnv home("HOME", "/nonexistent-home");
    ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
    EXPECT_EQ(codegen::resolveKernelCacheDir({}), "/nonexistent-home/.cache/kiln/kernels");
  }
}
