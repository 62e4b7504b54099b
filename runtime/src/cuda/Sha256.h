// SHA-256 (FIPS 180-4) for cache keys and entry checksums. The runtime may
// use system libraries only (no LLVM's llvm::SHA256), so it carries this
// small implementation.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace kiln::runtime::cuda {

class Sha256 {
public:
  Sha256();
  /// Feeds `bytes` bytes; call any number of times before digest().
  void update(const void *data, size_t bytes);
  void update(const std::string &text) { update(text.data(), text.size()); }
  /// Feeds `text` and a NUL, so that no two field lists hash the same text.
  void field(const std::string &text);
  /// The 32-byte digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  /// digest() as 64 lower-case hex characters.
  std::string hex_digest();

private:
  void compress(const uint8_t *block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

} // namespace kiln::runtime::cuda
