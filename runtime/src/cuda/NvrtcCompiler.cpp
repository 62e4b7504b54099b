// NvrtcCompiler: keys, the memory and disk caches, batch compiles, counters
// (Nvrtc.h).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "NvrtcDiskCache.h"
#include "NvrtcProgram.h"
#include "Sha256.h"
#include "kiln/runtime/cuda/Nvrtc.h"

namespace kiln::runtime::cuda {
namespace {

/// Bump when the entry layout or anything the key does not cover changes
/// (Kiln's fixed options are in the key already).
constexpr const char *kCacheFormat = "kiln-nvrtc-cache-v1";
/// Hex digits of the key in a file name (96 bits: collisions are also
/// caught by the checksum, which covers the whole key).
constexpr size_t kFileNameHashDigits = 24;

/// Kiln's options before the caller's extras (Nvrtc.h explains each).
std::vector<std::string> base_options(const CompileTarget &target) {
  std::vector<std::string> options = {"-arch=" + target.arch_name(), "--std=c++17", "-default-device"};
  if (target.kind == BinaryKind::Cubin)
    options.push_back("-Xptxas=-v"); // ptxas runs only for a CUBIN
  return options;
}

/// Counters of every compiler in the process.
struct ProcessCounters {
  std::mutex mutex;
  NvrtcCacheStats stats;
};

ProcessCounters &process_counters() {
  static ProcessCounters counters;
  return counters;
}

/// Adds `delta` to this compiler's and the process's counters.
void count(std::mutex &mutex, NvrtcCacheStats &stats, const NvrtcCacheStats &delta) {
  auto add = [&](NvrtcCacheStats &s) {
    s.memory_hits += delta.memory_hits;
    s.disk_hits += delta.disk_hits;
    s.misses += delta.misses;
    s.bad_entries += delta.bad_entries;
    s.stores += delta.stores;
    s.store_failures += delta.store_failures;
    s.compile_seconds += delta.compile_seconds;
  };
  {
    std::lock_guard<std::mutex> lock(mutex);
    add(stats);
  }
  std::lock_guard<std::mutex> lock(process_counters().mutex);
  add(process_counters().stats);
}

CompiledModule module_from(const CompileTarget &target, std::string key, std::string binary, std::string log) {
  CompiledModule module;
  module.target = target;
  module.binary = std::move(binary);
  module.log = std::move(log);
  module.kernels = parse_ptxas_log(module.log);
  module.cache_key = std::move(key);
  return module;
}

} // namespace

NvrtcCompiler::NvrtcCompiler(NvrtcCompilerOptions options)
    : options_(std::move(options)), cache_dir_(options_.cache_dir ? *options_.cache_dir : default_kernel_cache_dir()) {}

std::vector<std::string> NvrtcCompiler::options_for(const CompileTarget &target) const {
  std::vector<std::string> options = base_options(target);
  options.insert(options.end(), options_.extra_options.begin(), options_.extra_options.end());
  return options;
}

std::string NvrtcCompiler::key_for(const KernelSource &source, const CompileTarget &target) const {
  Sha256 sha;
  sha.field(kCacheFormat);
  sha.field("nvrtc " + nvrtc_version_string());
  sha.field(target.arch_name());
  for (const std::string &option : options_for(target))
    sha.field(option);
  sha.field(source.file_name);
  for (const std::string &name : source.kernel_names)
    sha.field(name);
  sha.field(source.code);
  return sha.hex_digest();
}

std::string NvrtcCompiler::path_for(const std::string &key, const CompileTarget &target) const {
  if (cache_dir_.empty())
    return "";
  std::string arch =
      target.kind == BinaryKind::Cubin ? "sm" + std::to_string(target.arch) : "compute" + std::to_string(target.arch);
  return cache_dir_ + "/kernel_" + key.substr(0, kFileNameHashDigits) + "_" + arch + "_nvrtc" + nvrtc_version_string() +
         (target.kind == BinaryKind::Cubin ? ".cubin" : ".ptx");
}

std::string NvrtcCompiler::cache_path(const KernelSource &source, int device_arch) const {
  CompileTarget target = choose_compile_target(device_arch);
  return path_for(key_for(source, target), target);
}

std::optional<CompiledModule> NvrtcCompiler::find_in_memory(const std::string &key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = memory_.find(key);
  if (it == memory_.end())
    return std::nullopt;
  return it->second;
}

std::optional<CompiledModule> NvrtcCompiler::find_on_disk(const std::string &key, const CompileTarget &target) {
  std::string path = path_for(key, target);
  if (path.empty())
    return std::nullopt;
  std::string binary, log;
  CacheRead read = read_cache_entry(path, key, binary, log);
  if (read == CacheRead::Bad)
    count(mutex_, stats_, NvrtcCacheStats{0, 0, 0, /*bad_entries=*/1});
  if (read != CacheRead::Ok)
    return std::nullopt;
  return module_from(target, key, std::move(binary), std::move(log));
}

void NvrtcCompiler::remember(const CompiledModule &module) {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_.emplace(module.cache_key, module);
}

CompiledModule NvrtcCompiler::compile(const KernelSource &source, int device_arch) {
  return compile_for(source, choose_compile_target(device_arch));
}

CompiledModule NvrtcCompiler::compile_for(const KernelSource &source, const CompileTarget &target) {
  std::string key = key_for(source, target);
  if (std::optional<CompiledModule> hit = find_in_memory(key)) {
    count(mutex_, stats_, NvrtcCacheStats{/*memory_hits=*/1});
    hit->cache = CacheOutcome::MemoryHit;
    return *hit;
  }
  if (std::optional<CompiledModule> hit = find_on_disk(key, target)) {
    count(mutex_, stats_, NvrtcCacheStats{0, /*disk_hits=*/1});
    remember(*hit);
    hit->cache = CacheOutcome::DiskHit;
    return *hit;
  }
  NvrtcOutput out = run_nvrtc(source, target, options_for(target));
  CompiledModule module = module_from(target, key, std::move(out.binary), std::move(out.log));
  module.compile_seconds = out.seconds;
  NvrtcCacheStats delta{0, 0, /*misses=*/1};
  delta.compile_seconds = out.seconds;
  if (std::string path = path_for(key, target); !path.empty()) {
    bool stored = write_cache_entry(path, encode_cache_entry(key, module.binary, module.log));
    (stored ? delta.stores : delta.store_failures) = 1;
  }
  count(mutex_, stats_, delta);
  remember(module);
  return module;
}

std::vector<CompiledModule> NvrtcCompiler::compile_batch(const std::vector<KernelSource> &sources, int device_arch,
                                                         int threads) {
  std::vector<CompiledModule> results(sources.size());
  std::vector<std::exception_ptr> errors(sources.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < sources.size(); i = next++) {
      try {
        results[i] = compile(sources[i], device_arch);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  size_t count = std::min<size_t>(std::max(threads, 1), sources.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t)
    pool.emplace_back(worker);
  worker(); // the calling thread is one of the `threads`
  for (std::thread &thread : pool)
    thread.join();
  for (const std::exception_ptr &error : errors)
    if (error)
      std::rethrow_exception(error);
  return results;
}

NvrtcCacheStats NvrtcCompiler::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

NvrtcCacheStats nvrtc_process_stats() {
  std::lock_guard<std::mutex> lock(process_counters().mutex);
  return process_counters().stats;
}

NvrtcCompiler &default_nvrtc_compiler() {
  static auto *compiler = new NvrtcCompiler();
  return *compiler;
}

} // namespace kiln::runtime::cuda
