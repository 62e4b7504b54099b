// KeyValueTable (KeyValueTable.h): c10d's store semantics on a std::map.
#include "KeyValueTable.h"

#include <cerrno>
#include <cstdlib>

#include "kiln/runtime/distributed/Store.h"

namespace kiln::runtime::distributed {

const std::vector<uint8_t> *KeyValueTable::find(const std::string &key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

/// Parses decimal text the way add() stores it; false when it is not one
/// whole int64.
static bool parse_int64(const std::vector<uint8_t> &text, int64_t *out) {
  const std::string s(text.begin(), text.end());
  if (s.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  *out = v;
  return true;
}

int64_t KeyValueTable::add(const std::string &key, int64_t delta, const std::string &store) {
  auto &value = data_[key];
  int64_t now = 0;
  if (!value.empty() && !parse_int64(value, &now))
    throw DistributedError(DistributedError::Kind::Invalid,
                           store + " add('" + key + "'): the value there is not an integer (" +
                               std::to_string(value.size()) + " bytes); add() keys hold decimal text");
  const std::string sum = std::to_string(now + delta);
  value.assign(sum.begin(), sum.end());
  return now + delta;
}

std::vector<uint8_t> KeyValueTable::compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                                const std::vector<uint8_t> &desired, bool *changed) {
  *changed = false;
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty())
      return expected; // c10d: an absent key with a non-empty expected stays absent
    data_[key] = desired;
    *changed = true;
    return desired;
  }
  if (it->second == expected && expected != desired) {
    it->second = desired;
    *changed = true;
  }
  return it->second;
}

bool KeyValueTable::has_all(const std::vector<std::string> &keys) const {
  for (const auto &k : keys)
    if (!data_.count(k))
      return false;
  return true;
}

std::string KeyValueTable::missing(const std::vector<std::string> &keys) const {
  std::vector<std::string> absent;
  for (const auto &k : keys)
    if (!data_.count(k))
      absent.push_back(k);
  return quote_keys(absent);
}

int64_t KeyValueTable::user_key_count() const {
  int64_t n = 0;
  for (const auto &[key, value] : data_)
    if (key.rfind(kInternalKeyPrefix, 0) != 0)
      ++n;
  return n;
}

std::string quote_keys(const std::vector<std::string> &keys) {
  std::string out;
  for (const auto &k : keys)
    out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

} // namespace kiln::runtime::distributed
