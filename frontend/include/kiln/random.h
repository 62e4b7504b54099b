// kiln/random.h - seeded, counter-based random numbers.
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a stream is (seed, offset); the same pair always gives the same
// numbers, so a draw can be replayed exactly. Matches the generator family
// PyTorch uses on CUDA (not PyTorch's CPU mt19937 values).
#pragma once

#include <array>
#include <cstdint>

namespace kiln {

class Generator {
public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
    buffered_ = 0;
  }
  uint64_t seed() const { return seed_; }
  /// Number of 128-bit Philox blocks consumed so far.
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) {
    offset_ = offset;
    buffered_ = 0;
  }
  /// Next four 32-bit random words; advances the offset by one block.
  std::array<uint32_t, 4> next4();
  /// Uniform float in [0, 1) with 24 random bits.
  float next_uniform();
  /// Philox4x32-10 of counter `counter` under `key` (exposed for tests).
  static std::array<uint32_t, 4> philox(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  std::array<uint32_t, 4> buffer_{};
  int buffered_ = 0;
};

/// The process-wide generator used by randn/uniform/shuffles and nn init.
Generator &default_generator();
/// Seeds the default generator (like torch.manual_seed).
void manual_seed(uint64_t seed);

}  // namespace kiln
