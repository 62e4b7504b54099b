// Half.h - float16 / bfloat16 bit patterns to and from float (round to
// nearest even), shared by the CPU GEMMs and convolutions; not installed.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln::runtime::cpu {

inline float half_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

inline uint16_t float_to_half(float f) {
  _Float16 h = static_cast<_Float16>(f);  // round to nearest even
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

inline float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (f != f) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

} // namespace kiln::runtime::cpu
