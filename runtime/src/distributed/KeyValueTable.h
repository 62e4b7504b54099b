// KeyValueTable.h - the c10d semantics of a store's operations on one map,
// shared by HashStore, TCPStore's server and FileStore's replayed log, so the
// rules (add on decimal text, compare_set on an absent key) live in one place.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime::distributed {

/// Keys to their values. Not thread-safe: its owner holds the lock.
class KeyValueTable {
public:
  void set(const std::string &key, std::vector<uint8_t> value) { data_[key] = std::move(value); }
  /// The value of `key`, or null when absent.
  const std::vector<uint8_t> *find(const std::string &key) const;
  /// c10d's add: the value is decimal text (absent: 0); returns the sum.
  /// Throws DistributedError Invalid (naming `store` and the key) when the
  /// value there is not an integer.
  int64_t add(const std::string &key, int64_t delta, const std::string &store);
  /// c10d's compare_set: swaps in `desired` when the value is `expected`, or
  /// when the key is absent and `expected` is empty. Returns the value after
  /// the call (`expected` for an absent key left absent); `*changed` says
  /// whether the table changed.
  std::vector<uint8_t> compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                   const std::vector<uint8_t> &desired, bool *changed);
  bool erase(const std::string &key) { return data_.erase(key) > 0; }
  bool has_all(const std::vector<std::string> &keys) const;
  /// The keys of `keys` that are absent, quoted: "'a', 'b'".
  std::string missing(const std::vector<std::string> &keys) const;
  /// The number of keys, not counting kInternalKeyPrefix ones.
  int64_t user_key_count() const;
  void clear() { data_.clear(); }

private:
  std::map<std::string, std::vector<uint8_t>> data_;
};

/// "'a', 'b'": keys as error messages name them.
std::string quote_keys(const std::vector<std::string> &keys);

} // namespace kiln::runtime::distributed
