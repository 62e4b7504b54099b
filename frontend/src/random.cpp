// Philox4x32-10 counter-based generator (Salmon et al., SC 2011).
#include "kiln/random.h"

namespace kiln {

std::array<uint32_t, 4> Generator::philox(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return ctr;
}

std::array<uint32_t, 4> Generator::next4() {
  std::array<uint32_t, 4> counter{static_cast<uint32_t>(offset_), static_cast<uint32_t>(offset_ >> 32), 0, 0};
  std::array<uint32_t, 2> key{static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)};
  ++offset_;
  buffered_ = 0;
  return philox(counter, key);
}

float Generator::next_uniform() {
  if (buffered_ == 0) {
    buffer_ = next4();
    buffered_ = 4;
  }
  uint32_t word = buffer_[4 - buffered_--];
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);
}

Generator &default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace kiln
