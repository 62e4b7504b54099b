// Host compilation of generated CUDA C for the simulator: the source plus
// the simulator's prelude, compiled by the host C++ compiler into a shared
// object, loaded with dlopen and cached on disk and in memory.
//
//   auto module = sim::load_module(source);           // compiles or hits a cache
//   sim::HostKernel k = module->kernel("add_f32");
//   void *args[] = {&x, &y, &out, &n};
//   sim::launch(k, {blocks}, {256}, 0, args);          // Grid.h
#pragma once

#include "kiln/runtime/sim/SimError.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::sim {

class HostModule;

/// One `extern "C" __global__` kernel of a loaded module. Cheap to copy;
/// valid as long as the process (modules are never unloaded).
struct HostKernel {
  const HostModule *module = nullptr;
  std::string name;
  /// kiln_sim_entry_<name>(void **args): calls the kernel with
  /// cuLaunchKernel's argument convention (args[i] points at parameter i).
  void (*entry)(void **args) = nullptr;
  /// kiln_sim_argsizes_<name>(out): the kernel's parameter count, and each
  /// parameter's size in bytes in out[i] when `out` is not null (what
  /// cuLaunchKernel knows from a CUBIN; a captured launch copies its
  /// argument values by these sizes). Null for a library built before it.
  unsigned long (*arg_sizes)(unsigned long *out) = nullptr;
};

/// A kernel library: the host-compiled source, loaded. Thread-safe.
class HostModule {
public:
  /// The kernel called `name`; throws std::invalid_argument listing the
  /// module's kernels when there is none.
  HostKernel kernel(const std::string &name) const;
  /// The `extern "C" __global__` kernels found in the source, in order.
  const std::vector<std::string> &kernel_names() const { return names_; }
  /// The hex SHA-256 cache key (prelude, source, compiler, flags).
  const std::string &key() const { return key_; }
  /// The dlopen handle (for the simulator's thread-local storage lookup).
  void *handle() const { return handle_; }
  /// Bytes of thread-local storage the library has: its static __shared__
  /// arrays (per block), plus a few bytes of the prelude's.
  size_t static_shared_bytes() const { return tls_bytes_; }

  HostModule(std::string key, void *handle, std::vector<std::string> names,
             std::vector<void (*)(void **)> entries, size_t tls_bytes);

private:
  std::string key_;
  void *handle_;
  std::vector<std::string> names_;
  std::vector<void (*)(void **)> entries_;
  size_t tls_bytes_;
};

/// Compiles `source` (a kernel following the kernel-source contract:
/// common14 / runtime/src/sim/README.md) against the prelude and loads it.
/// The compiler is $KILN_SIM_CXX (words split on spaces) or g++, run with
/// kSimCompileFlags; the result is cached in memory per process and on disk
/// under $KILN_CACHE_DIR/cuda-sim (the directory codegen's kernel cache
/// picks: KILN_DISABLE_CACHE, KILN_CACHE_DIR, XDG_CACHE_HOME, ~/.cache/kiln/
/// kernels), keyed by SHA-256 of (prelude, source, compiler version, flags),
/// written to a temp file and renamed. Throws CompileError with the
/// compiler's messages and the kernel names, or when the source has no
/// `__global__` kernel.
std::shared_ptr<const HostModule> load_module(const std::string &source);

/// The compiler flags (besides -o/-include/the source); ASan builds of Kiln
/// add -fsanitize=address (runtime/src/sim/README.md, "memory checks").
std::vector<std::string> compile_flags();

/// Process-wide counters, for tests and measurements.
struct CompileStats {
  uint64_t compiler_invocations = 0; ///< times the host compiler ran
  uint64_t memory_hits = 0;          ///< load_module served from memory
  uint64_t disk_hits = 0;            ///< ... from the disk cache
  double compile_seconds = 0;        ///< wall time spent in the compiler
};
CompileStats compile_stats();
/// Forgets the in-memory cache (loaded libraries stay mapped), so a test
/// can observe the disk cache.
void clear_memory_cache();

} // namespace kiln::runtime::sim
