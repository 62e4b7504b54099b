// kiln-fuzz-replay: runs every file of the seed corpora through the libFuzzer
// targets of this folder, without libFuzzer (the normal g++ build; ctest
// "fuzz-corpus-replay"). Each target's LLVMFuzzerTestOneInput is compiled
// under the name kiln_fuzz_<target> (CMakeLists.txt), so one executable holds
// them all.
//
// Usage: kiln-fuzz-replay <corpus root> [target ...]
//   replays <root>/<target>/* for the named targets (default: all); prints
//   each file before running it, so the last line before a crash names it.
//   Fails if a corpus folder is missing or empty.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" {
int kiln_fuzz_safetensors(const uint8_t *data, size_t size);
int kiln_fuzz_checkpoint(const uint8_t *data, size_t size);
int kiln_fuzz_kernel_cache(const uint8_t *data, size_t size);
int kiln_fuzz_kiln_dialect(const uint8_t *data, size_t size);
int kiln_fuzz_digits(const uint8_t *data, size_t size);
int kiln_fuzz_artifact(const uint8_t *data, size_t size);
}

namespace {

namespace fs = std::filesystem;

struct Target {
  const char *name;
  int (*run)(const uint8_t *, size_t);
};

constexpr Target kTargets[] = {{"safetensors", kiln_fuzz_safetensors},
                               {"checkpoint", kiln_fuzz_checkpoint},
                               {"kernel_cache", kiln_fuzz_kernel_cache},
                               {"kiln_dialect", kiln_fuzz_kiln_dialect},
                               {"digits", kiln_fuzz_digits},
                               {"artifact", kiln_fuzz_artifact}};

std::string read_file(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Replays one target's folder; the number of files, or -1 if there are none.
int replay(const Target &target, const fs::path &dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file())
      files.push_back(it->path());
  if (files.empty()) {
    std::fprintf(stderr, "kiln-fuzz-replay: no corpus files in %s\n", dir.c_str());
    return -1;
  }
  std::sort(files.begin(), files.end());
  for (const fs::path &f : files) {
    std::printf("%s: %s\n", target.name, f.filename().c_str());
    std::fflush(stdout);
    const std::string bytes = read_file(f);
    target.run(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  }
  return static_cast<int>(files.size());
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <corpus root> [target ...]\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  std::vector<std::string> wanted(argv + 2, argv + argc);
  int failures = 0, total = 0;
  for (const Target &t : kTargets) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), t.name) == wanted.end())
      continue;
    const int n = replay(t, root / t.name);
    if (n < 0)
      ++failures;
    else
      total += n;
    std::printf("kiln-fuzz-replay: %s: %d files\n", t.name, std::max(n, 0));
  }
  std::printf("kiln-fuzz-replay: %d files replayed, %d empty corpora\n", total, failures);
  return failures == 0 ? 0 : 1;
}
