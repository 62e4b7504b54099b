// codegen/KernelCache.h - the on-disk kernel cache (private to codegen/):
// the key of a kernel module, verified read and atomic write of a
// library's object code, and the process-wide counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "mlir/IR/BuiltinOps.h"

#include "kiln/codegen/Target.h"

namespace kiln::codegen {

/// Process-wide counters behind codegen::kernelCacheStats().
struct KernelCacheCounters {
  std::atomic<int64_t> hits{0}, misses{0}, bad_entries{0}, stores{0}, store_failures{0}, mlir_lowerings{0},
      llvm_compiles{0};
};
KernelCacheCounters &kernelCacheCounters();

/// SHA-256 (hex) of: the cache format, KILN_VERSION, LLVM_VERSION_STRING,
/// `targetPrefix` (Target::cacheKeyPrefix: the target, its machine and its
/// lowering) and the kernel module's IR as printed before lowering
/// (generic-free, no locations).
std::string kernelCacheKey(mlir::ModuleOp kernels, const std::string &targetPrefix);

/// `<dir>/<key>.o`.
std::string kernelCachePath(const std::string &dir, const std::string &key);

enum class CacheRead { Missing, Corrupt, Ok };
/// Reads an entry and checks its trailer (size, SHA-256 of key + object,
/// magic); `*object` gets the bare object on Ok, `*why` says why on Corrupt.
CacheRead readCachedObject(const std::string &path, const std::string &key, std::string *object, std::string *why);

/// Writes `library`'s object to `path` atomically: dumped to a unique temp
/// file in the same directory (created if needed), trailer appended, renamed
/// over `path`. False and `*error` on failure (the temp file is removed).
bool storeCachedObject(const KernelLibrary &library, const std::string &path, const std::string &key,
                       std::string *error);

} // namespace kiln::codegen
