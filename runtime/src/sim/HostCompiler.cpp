// Host compilation, the disk and memory caches, and loading (HostModule.h).
#include "kiln/runtime/sim/HostModule.h"

#include "ApiTable.h"
#include "Prelude.h"
#include "../cuda/Sha256.h"
#include "kiln/runtime/CacheDir.h"
#include "SourceRewrite.h"

#include <dlfcn.h>
#include <link.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

extern char **environ;

namespace kiln::runtime::sim {
namespace {

using detail::KilnSimApi;

/// Compiler output kept in an error message: enough for the first errors.
constexpr size_t kMaxCompilerMessageBytes = 8000;
/// Bump when the entry layout or anything the key does not hash changes
/// (the rewrite, the entry-point convention).
constexpr const char *kCacheVersion = "cuda-sim-v1";

struct Counters {
  std::atomic<uint64_t> compiler_invocations{0}, memory_hits{0}, disk_hits{0};
  std::atomic<double> compile_seconds{0};
};
Counters &counters() {
  static Counters c;
  return c;
}

/// Per key, the module or the compile in flight: several threads compile
/// different kernels at once; a second request for a key waits for the
/// first one's compile.
struct MemoryCache {
  std::mutex mutex;
  std::map<std::string, std::shared_future<std::shared_ptr<const HostModule>>> by_key;
};
MemoryCache &memory_cache() {
  static MemoryCache *c = new MemoryCache; // modules live as long as the process
  return *c;
}

std::vector<std::string> compiler_command() {
  const char *env = std::getenv("KILN_SIM_CXX");
  std::istringstream words(env && *env ? env : "g++");
  std::vector<std::string> argv;
  for (std::string w; words >> w;) argv.push_back(w);
  return argv;
}

/// Runs argv, returning the exit status (-1: could not start) and the
/// merged stdout+stderr.
int run_capturing(const std::vector<std::string> &argv, std::string &output) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  std::vector<char *> args;
  for (const std::string &a : argv) args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  char chunk[4096];
  for (ssize_t n; (n = read(pipe_fds[0], chunk, sizeof chunk)) > 0;) output.append(chunk, size_t(n));
  close(pipe_fds[0]);
  if (spawned != 0) {
    output = std::string("cannot start ") + argv[0] + ": " + std::strerror(spawned);
    return -1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// The first line of `<compiler> --version`, once per process.
const std::string &compiler_identity() {
  static const std::string id = [] {
    std::vector<std::string> argv = compiler_command();
    argv.push_back("--version");
    std::string out;
    run_capturing(argv, out);
    return out.substr(0, out.find('\n'));
  }();
  return id;
}

/// The kernel cache folder (kiln/runtime/CacheDir.h) plus "cuda-sim"; ""
/// when caching is off.
std::string cache_dir() {
  const std::string base = default_kernel_cache_dir();
  return base.empty() ? "" : base + "/cuda-sim";
}

bool make_dirs(const std::string &path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    std::string prefix = path.substr(0, at);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

std::string unique_suffix() {
  static std::atomic<unsigned> n{0};
  return ".tmp." + std::to_string(getpid()) + "." + std::to_string(n++);
}

/// Writes `text` to `path` through a temp file and a rename (atomic for
/// readers in other processes).
bool write_atomically(const std::string &path, const std::string &text) {
  const std::string tmp = path + unique_suffix();
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out.flush()) return false;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

bool file_exists(const std::string &path) { return access(path.c_str(), R_OK) == 0; }

std::string join_names(const std::vector<std::string> &names) {
  std::string text;
  for (const std::string &n : names) text += (text.empty() ? "'" : ", '") + n + "'";
  return text;
}

/// True when ld.lld is on PATH: it links a kernel library in ~0.2 s less
/// than GNU ld (0.35 s vs 0.55 s per kernel measured here).
bool have_lld() {
  static const bool found = [] {
    const char *path = std::getenv("PATH");
    std::istringstream dirs(path ? path : "");
    for (std::string dir; std::getline(dirs, dir, ':');)
      if (!dir.empty() && access((dir + "/ld.lld").c_str(), X_OK) == 0) return true;
    return false;
  }();
  return found;
}

} // namespace

std::vector<std::string> compile_flags() {
  std::vector<std::string> flags = {"-std=c++17", "-x", "c++", "-O1", "-fPIC", "-shared", "-fno-strict-aliasing",
                                    "-g", "-w", "-fsanitize=undefined", "-fsanitize=bounds",
                                    "-fno-sanitize=vptr", "-fno-sanitize-recover=all", "-Wl,-Bsymbolic"};
  if (have_lld()) flags.push_back("-fuse-ld=lld");
#if defined(__SANITIZE_ADDRESS__)
  // The process runs with ASan (a KILN_SANITIZE build): instrument the
  // kernels too. A non-ASan process cannot load an ASan library.
  flags.push_back("-fsanitize=address");
#endif
  return flags;
}

CompileStats compile_stats() {
  Counters &c = counters();
  return CompileStats{c.compiler_invocations.load(), c.memory_hits.load(), c.disk_hits.load(),
                      c.compile_seconds.load()};
}

void clear_memory_cache() {
  MemoryCache &cache = memory_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.by_key.clear();
}

} // namespace kiln::runtime::sim

namespace kiln::runtime::sim {
namespace {

struct TlsQuery {
  ElfW(Addr) load_address;
  size_t bytes = 0;
};

/// Bytes of the PT_TLS segment of the library loaded at `handle`.
size_t tls_segment_bytes(void *handle) {
  struct link_map *map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map) return 0;
  TlsQuery query{map->l_addr};
  dl_iterate_phdr(
      [](struct dl_phdr_info *info, size_t, void *data) {
        auto *q = static_cast<TlsQuery *>(data);
        if (info->dlpi_addr != q->load_address) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_TLS) q->bytes = info->dlpi_phdr[i].p_memsz;
        return 1;
      },
      &query);
  return query.bytes;
}

/// dlopen + bind the entry-point table + look up every kernel's entry.
/// Returns null (with `why`) when the library cannot be used.
std::shared_ptr<const HostModule> open_library(const std::string &path, const std::string &key,
                                               const std::vector<std::string> &names, std::string &why) {
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    why = dlerror();
    return nullptr;
  }
  auto *api = static_cast<KilnSimApi *>(dlsym(handle, detail::kApiSymbol));
  std::vector<void (*)(void **)> entries;
  for (const std::string &n : names)
    entries.push_back(reinterpret_cast<void (*)(void **)>(dlsym(handle, (detail::kEntryPrefix + n).c_str())));
  bool complete = api && dlsym(handle, detail::kTlsTouchSymbol);
  for (auto *e : entries) complete = complete && e;
  if (!complete) {
    why = "the library lacks the simulator's entry points";
    return nullptr; // never dlclose: see README (thread-local storage in workers)
  }
  *api = detail::runtime_api();
  return std::make_shared<HostModule>(key, handle, names, std::move(entries), tls_segment_bytes(handle));
}

std::string cache_key(const std::string &prelude, const std::string &source) {
  cuda::Sha256 sha;
  sha.field(kCacheVersion);
  sha.field(prelude);
  sha.field(source);
  for (const std::string &word : compiler_command()) sha.field(word);
  sha.field(compiler_identity());
  for (const std::string &flag : compile_flags()) sha.field(flag);
  return sha.hex_digest();
}

/// Runs the compiler on `source_path` (with the prelude) into `out_path`;
/// throws CompileError with its messages on failure.
void run_compiler(const std::string &prelude_path, const std::string &source_path, const std::string &out_path,
                  const std::vector<std::string> &names) {
  std::vector<std::string> argv = compiler_command();
  for (const std::string &flag : compile_flags()) argv.push_back(flag);
  argv.insert(argv.end(), {"-include", prelude_path, source_path, "-o", out_path});
  auto start = std::chrono::steady_clock::now();
  std::string output;
  int status = run_capturing(argv, output);
  counters().compiler_invocations++;
  std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  counters().compile_seconds = counters().compile_seconds.load() + took.count();
  if (status == 0) return;
  if (output.size() > kMaxCompilerMessageBytes) output = output.substr(0, kMaxCompilerMessageBytes) + "\n[...]";
  throw CompileError("cuda-sim: " + argv[0] + " failed (exit status " + std::to_string(status) +
                     ") compiling kernel(s) " + join_names(names) + ":\n" + output);
}

struct Paths {
  std::string dir, prelude, source, library;
  bool temporary = false; // no disk cache: remove after loading
};

Paths paths_for(const std::string &key, const std::string &prelude_key) {
  Paths p;
  p.dir = cache_dir();
  if (p.dir.empty() || !make_dirs(p.dir)) {
    char tmpl[] = "/tmp/kiln-cuda-sim-XXXXXX";
    if (!mkdtemp(tmpl)) throw CompileError("cuda-sim: cannot create a temporary directory for host compilation");
    p.dir = tmpl;
    p.temporary = true;
  }
  p.prelude = p.dir + "/prelude-" + prelude_key.substr(0, 16) + ".h";
  p.source = p.dir + "/" + key + ".cu";
  p.library = p.dir + "/" + key + ".so";
  return p;
}

std::shared_ptr<const HostModule> compile_and_open(const std::string &key, const std::string &prelude,
                                                   const std::string &text, const std::vector<std::string> &names) {
  cuda::Sha256 prelude_sha;
  prelude_sha.field(prelude);
  Paths p = paths_for(key, prelude_sha.hex_digest());
  std::string why;
  if (!p.temporary && file_exists(p.library)) {
    if (auto module = open_library(p.library, key, names, why)) {
      counters().disk_hits++;
      return module;
    }
    std::remove(p.library.c_str()); // a bad entry: rebuild it
  }
  if (!file_exists(p.prelude) && !write_atomically(p.prelude, prelude))
    throw CompileError("cuda-sim: cannot write " + p.prelude);
  if (!write_atomically(p.source, text)) throw CompileError("cuda-sim: cannot write " + p.source);
  const std::string tmp = p.library + unique_suffix();
  try {
    run_compiler(p.prelude, p.source, tmp, names);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), p.library.c_str()) != 0)
    throw CompileError("cuda-sim: cannot rename " + tmp + " to " + p.library);
  auto module = open_library(p.library, key, names, why);
  if (p.temporary) {
    for (const std::string *f : {&p.prelude, &p.source, &p.library}) std::remove(f->c_str());
    rmdir(p.dir.c_str());
  }
  if (!module) throw CompileError("cuda-sim: cannot load " + p.library + " (kernels " + join_names(names) + "): " + why);
  return module;
}

} // namespace

HostModule::HostModule(std::string key, void *handle, std::vector<std::string> names,
                       std::vector<void (*)(void **)> entries, size_t tls_bytes)
    : key_(std::move(key)), handle_(handle), names_(std::move(names)), entries_(std::move(entries)),
      tls_bytes_(tls_bytes) {}

HostKernel HostModule::kernel(const std::string &name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) {
      auto *sizes = reinterpret_cast<unsigned long (*)(unsigned long *)>(
          dlsym(handle_, (detail::kArgSizesPrefix + name).c_str()));
      return HostKernel{this, name, entries_[i], sizes};
    }
  throw std::invalid_argument("cuda-sim: no kernel '" + name + "' in the module; it has " + join_names(names_));
}

std::shared_ptr<const HostModule> load_module(const std::string &source) {
  std::vector<std::string> names = detail::find_kernels(source);
  if (names.empty())
    throw CompileError("cuda-sim: the source has no `extern \"C\" __global__ void name(...)` kernel");
  const std::string prelude = detail::prelude_text();
  const std::string text = detail::rewrite_for_host(source, names);
  const std::string key = cache_key(prelude, text);
  MemoryCache &cache = memory_cache();
  std::promise<std::shared_ptr<const HostModule>> promise;
  std::shared_future<std::shared_ptr<const HostModule>> pending;
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (auto it = cache.by_key.find(key); it != cache.by_key.end()) {
      counters().memory_hits++;
      pending = it->second;
    } else {
      cache.by_key[key] = promise.get_future().share();
    }
  }
  if (pending.valid()) return pending.get(); // waits for a compile in flight; rethrows its error
  try {
    auto module = compile_and_open(key, prelude, text, names);
    promise.set_value(module);
    return module;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.by_key.erase(key); // a later request compiles again
    throw;
  }
}

} // namespace kiln::runtime::sim
