// kiln/runtime/cuda/Nvrtc.h - compile CUDA C to a CUBIN (SASS) or PTX with
// NVRTC, loaded at run time (libnvrtc.so.13); no GPU and no toolkit headers
// needed. Results are cached in memory and on disk (PyTorch's jiterator
// cache: aten/src/ATen/native/cuda/jit_utils.cpp).
//
//   kiln::runtime::cuda::NvrtcCompiler compiler;             // cache: $KILN_CACHE_DIR...
//   KernelSource source{code, {"add_one"}};                   // extern "C" __global__ kernels
//   CompiledModule m = compiler.compile(source, /*device_arch=*/90);
//   m.kind == BinaryKind::Cubin; m.binary.size() > 0;         // an sm_90 CUBIN
//   m.kernel("add_one")->registers;                           // from ptxas -v
//
// The source must include no headers (NVRTC 13 finds none without the
// toolkit's include folder; no include path is passed). Options always
// given: -arch, --std=c++17, -default-device (functions without an
// execution space are __device__), and for CUBINs -Xptxas=-v (ptxas'
// per-kernel report, parsed into KernelResources).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "kiln/runtime/CacheDir.h"
#include <unordered_map>
#include <vector>

namespace kiln::runtime::cuda {

/// The sm_XX compiled for when there is no device: 90 (H100/H200).
constexpr int kDefaultCudaArch = 90;

/// One kernel's resources from ptxas' -v report.
struct KernelResources {
  std::string name;
  int registers = 0;             ///< "Used N registers"
  int barriers = 0;              ///< "used N barriers"
  int64_t stack_frame_bytes = 0; ///< "N bytes stack frame"
  int64_t spill_store_bytes = 0; ///< "N bytes spill stores"
  int64_t spill_load_bytes = 0;  ///< "N bytes spill loads"
  int64_t shared_bytes = 0;      ///< "N bytes smem" (static __shared__); 0 when absent
};

/// Parses NVRTC 13's program log with -Xptxas=-v (a "Compiling entry
/// function 'k' for 'sm_90'" line starts each kernel, then "Function
/// properties", the stack/spill line, and "Used N registers, used N
/// barriers[, N bytes smem]..."). Kernels in log order; lines it does not
/// know are skipped.
std::vector<KernelResources> parse_ptxas_log(const std::string &log);

/// NVRTC's version (nvrtcVersion).
struct NvrtcVersion {
  int major = 0;
  int minor = 0;
};

/// Whether libnvrtc.so.13 loaded; if not, why (empty when it did).
bool nvrtc_available();
std::string nvrtc_unavailable_reason();
/// Throw CudaError naming the loading error when NVRTC is missing.
NvrtcVersion nvrtc_version();
/// The sm_XX numbers this NVRTC compiles for, ascending (NVRTC 13.0: 75 ... 121).
std::vector<int> nvrtc_supported_archs();

enum class BinaryKind { Cubin, Ptx };

/// What a compile produces for a device: a CUBIN for `arch` when NVRTC
/// knows it; for a device newer than NVRTC knows (or an sm between known
/// ones), PTX for the newest known arch below it, which the driver JITs.
struct CompileTarget {
  BinaryKind kind = BinaryKind::Cubin;
  int arch = kDefaultCudaArch;
  /// "sm_90" for a CUBIN, "compute_121" for PTX (nvrtc's -arch value).
  std::string arch_name() const;
};

/// The target an arch name names, the inverse of CompileTarget::arch_name:
/// "sm_90" a CUBIN, "compute_90" PTX (1 to 4 digits); nullopt for any other
/// string.
std::optional<CompileTarget> parse_arch_name(const std::string &name);

/// Chooses the target for a device of compute capability `device_arch`
/// (major * 10 + minor). Throws CudaError when it is older than every arch
/// NVRTC supports (NVRTC 13: sm_70 and older).
CompileTarget choose_compile_target(int device_arch);

/// A translation unit of extern "C" __global__ kernels.
struct KernelSource {
  std::string code;
  /// The kernels the caller will launch; each must appear in the result
  /// (a compile error says so otherwise).
  std::vector<std::string> kernel_names;
  /// The name NVRTC reports errors under ("kiln_kernels.cu(3): error: ...").
  std::string file_name = "kiln_kernels.cu";
};

/// Where a result came from.
enum class CacheOutcome { Miss, MemoryHit, DiskHit };

/// One compiled translation unit.
struct CompiledModule {
  CompileTarget target;
  std::string binary;                   ///< CUBIN bytes, or PTX text (NUL included, as nvrtcGetPTX gives it)
  std::string log;                      ///< NVRTC's log (ptxas' report for CUBINs) without its "Compile time" lines
  std::vector<KernelResources> kernels; ///< parse_ptxas_log(log); empty for PTX
  std::string cache_key;                ///< SHA-256 hex of what the result depends on
  CacheOutcome cache = CacheOutcome::Miss;
  double compile_seconds = 0; ///< NVRTC's time for this call (0 on a hit)
  /// The resources of kernel `name`, or null.
  const KernelResources *kernel(const std::string &name) const;
};

/// Cache counters (for kiln::explain); `compile_seconds` is NVRTC time.
struct NvrtcCacheStats {
  int64_t memory_hits = 0;
  int64_t disk_hits = 0;
  int64_t misses = 0;
  int64_t bad_entries = 0; ///< disk entries rejected (truncated, corrupted, another key's)
  int64_t stores = 0;
  int64_t store_failures = 0; ///< unwritable cache folder etc.; never fails a compile
  double compile_seconds = 0;
};

struct NvrtcCompilerOptions {
  /// The disk cache folder; unset: default_kernel_cache_dir(); "" disables.
  std::optional<std::string> cache_dir;
  /// Appended to Kiln's options (and part of the cache key), e.g.
  /// "--maxrregcount=64", "-lineinfo".
  std::vector<std::string> extra_options;
};

/// The kernel cache folder rule (kiln/runtime/CacheDir.h); NVRTC's entries
/// live directly in it.
using kiln::runtime::default_kernel_cache_dir;

/// NVRTC with an in-memory cache (per object) and a disk cache (shared).
/// Thread-safe: compile() and compile_batch() may be called concurrently.
///
/// Disk entry: `<dir>/kernel_<hash>_<arch>_nvrtc<M.m>.<cubin|ptx>` (the
/// name says what it depends on, as PyTorch's jiterator cache), holding a
/// 48-byte header (magic "KILNCU01", payload bytes, SHA-256 of key +
/// payload) and the payload (binary size, binary, log). Written to a
/// temporary file then renamed; an entry that fails the check is counted in
/// `bad_entries`, recompiled and overwritten, never used.
class NvrtcCompiler {
public:
  explicit NvrtcCompiler(NvrtcCompilerOptions options = {});

  /// Compiles `source` for `choose_compile_target(device_arch)`. Throws
  /// CudaError when NVRTC is missing, and on a compile error with NVRTC's
  /// log and the failing source line ("kiln_kernels.cu line 3: int x = ;").
  CompiledModule compile(const KernelSource &source, int device_arch = kDefaultCudaArch);
  /// The same for an explicit target: a CUBIN for sm_XX or PTX for
  /// compute_XX (what kiln::export_compiled stores for each named arch).
  CompiledModule compile_for(const KernelSource &source, const CompileTarget &target);

  /// Compiles `sources` on up to `threads` threads; results in input order,
  /// identical to compiling one by one. The first failure (in input order)
  /// is rethrown after all have finished.
  std::vector<CompiledModule> compile_batch(const std::vector<KernelSource> &sources,
                                            int device_arch = kDefaultCudaArch, int threads = 2);

  /// This object's counters.
  NvrtcCacheStats stats() const;
  /// The disk cache folder ("" when disabled).
  const std::string &cache_dir() const { return cache_dir_; }
  /// The disk entry `compile(source, device_arch)` reads and writes ("" when
  /// the disk cache is disabled).
  std::string cache_path(const KernelSource &source, int device_arch = kDefaultCudaArch) const;

private:
  std::vector<std::string> options_for(const CompileTarget &target) const;
  std::string key_for(const KernelSource &source, const CompileTarget &target) const;
  std::string path_for(const std::string &key, const CompileTarget &target) const;
  std::optional<CompiledModule> find_in_memory(const std::string &key);
  std::optional<CompiledModule> find_on_disk(const std::string &key, const CompileTarget &target);
  void remember(const CompiledModule &module);

  NvrtcCompilerOptions options_;
  std::string cache_dir_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, CompiledModule> memory_;
  NvrtcCacheStats stats_;
};

/// The counters of every NvrtcCompiler in the process, summed.
NvrtcCacheStats nvrtc_process_stats();

/// A process-wide compiler with the default options (lazily created).
NvrtcCompiler &default_nvrtc_compiler();

} // namespace kiln::runtime::cuda
