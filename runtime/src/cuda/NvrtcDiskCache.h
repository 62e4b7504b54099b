// The NVRTC disk cache's entries (Nvrtc.h, NvrtcCompiler): a verified
// header, an atomic write.
//
// Layout (little-endian):
//   [0, 8)    magic "KILNCU01"
//   [8, 16)   payload bytes (u64)
//   [16, 48)  SHA-256 of (key, NUL, payload): binds the entry to its key
//   payload:  binary bytes (u64), binary, log (the rest)
#pragma once

#include <string>

namespace kiln::runtime::cuda {

/// The whole entry file for `key`.
std::string encode_cache_entry(const std::string &key, const std::string &binary, const std::string &log);

enum class CacheRead { Missing, Bad, Ok };

/// Reads `path`: Missing when there is no such file, Bad when it is not a
/// well-formed entry of `key` (short, wrong magic or length, checksum
/// mismatch, a directory), Ok with `binary` and `log` filled.
CacheRead read_cache_entry(const std::string &path, const std::string &key, std::string &binary, std::string &log);

/// Writes `bytes` to a unique temporary file beside `path` and renames it
/// over `path` (atomic: readers see the old entry or the new one), creating
/// the folder. Returns false on any failure (the cache never fails a compile).
bool write_cache_entry(const std::string &path, const std::string &bytes);

} // namespace kiln::runtime::cuda
