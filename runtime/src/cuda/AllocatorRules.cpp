// The caching allocator's size rules and configuration (AllocatorRules.h).
#include "kiln/runtime/cuda/AllocatorRules.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace kiln::runtime::cuda {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB * 1024;
constexpr uint64_t kGiB = kMiB * 1024;
constexpr const char *kMaxSplitKey = "max_split_size_mb";

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

[[noreturn]] void bad_conf(const std::string &conf, const std::string &why) {
  throw std::invalid_argument(std::string(kAllocConfEnv) + "=\"" + conf + "\": " + why +
                              "; expected \"max_split_size_mb:N\" with N > " + std::to_string(kLargeBuffer / kMiB) +
                              " (or unset it)");
}

} // namespace

size_t round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize)
    return kMinBlockSize;
  return round_up(nbytes, kMinBlockSize);
}

PoolKind pool_of(size_t rounded_size) { return rounded_size <= kSmallSize ? PoolKind::Small : PoolKind::Large; }

size_t segment_size(size_t rounded_size) {
  if (rounded_size <= kSmallSize)
    return kSmallBuffer;
  if (rounded_size < kMinLargeAlloc)
    return kLargeBuffer;
  return round_up(rounded_size, kRoundLarge);
}

bool should_split(size_t block_size, size_t rounded_size, PoolKind pool, size_t max_split_size) {
  size_t remaining = block_size - rounded_size;
  if (pool == PoolKind::Small)
    return remaining >= kMinBlockSize;
  return rounded_size < max_split_size && remaining > kSmallSize;
}

AllocatorOptions parse_allocator_conf(const std::string &conf) {
  AllocatorOptions options;
  if (conf.empty())
    return options;
  size_t colon = conf.find(':');
  if (colon == std::string::npos)
    bad_conf(conf, "no ':' between key and value");
  std::string key = conf.substr(0, colon);
  std::string value = conf.substr(colon + 1);
  if (key != kMaxSplitKey)
    bad_conf(conf, "unknown key \"" + key + "\"");
  char *end = nullptr;
  unsigned long long mb = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0')
    bad_conf(conf, "value \"" + value + "\" is not a whole number of MiB");
  if (mb <= kLargeBuffer / kMiB)
    bad_conf(conf, "max_split_size_mb " + value + " is too small");
  options.max_split_size = static_cast<size_t>(mb * kMiB);
  return options;
}

AllocatorOptions allocator_options_from_env() {
  const char *conf = std::getenv(kAllocConfEnv);
  return parse_allocator_conf(conf ? conf : "");
}

std::string format_bytes(uint64_t nbytes) {
  if (nbytes < kKiB)
    return std::to_string(nbytes) + " bytes";
  const char *unit = "KiB";
  double scaled = static_cast<double>(nbytes) / kKiB;
  if (nbytes >= kGiB) {
    unit = "GiB";
    scaled = static_cast<double>(nbytes) / kGiB;
  } else if (nbytes >= kMiB) {
    unit = "MiB";
    scaled = static_cast<double>(nbytes) / kMiB;
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%.2f %s", scaled, unit);
  return text;
}

} // namespace kiln::runtime::cuda
