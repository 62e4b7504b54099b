// SHA-256 (FIPS 180-4) for the simulator's cache keys: runtime/ links no
// LLVM (codegen's kernel cache uses llvm::SHA256). Not installed.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::runtime::sim::detail {

/// Incremental SHA-256; hex() finishes and returns 64 lowercase hex digits.
class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t bytes);
  /// update(text) then a NUL, so no two field lists hash the same bytes.
  void field(const std::string &text);
  std::string hex();

private:
  void block(const uint8_t *p);
  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

} // namespace kiln::runtime::sim::detail
