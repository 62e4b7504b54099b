// PrefixStore (kiln/runtime/distributed/Store.h).
#include "kiln/runtime/distributed/Store.h"

namespace kiln::runtime::distributed {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  if (!inner_) throw DistributedError(DistributedError::Kind::Invalid, "PrefixStore: no inner store");
  timeout_ = inner_->timeout();
}

void PrefixStore::set(const std::string &key, const std::vector<uint8_t> &value) { inner_->set(key_of(key), value); }
std::vector<uint8_t> PrefixStore::get(const std::string &key) { return inner_->get(key_of(key)); }
int64_t PrefixStore::add(const std::string &key, int64_t delta) { return inner_->add(key_of(key), delta); }
std::vector<uint8_t> PrefixStore::compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                              const std::vector<uint8_t> &desired) {
  return inner_->compare_set(key_of(key), expected, desired);
}
void PrefixStore::wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  for (const auto &k : keys) full.push_back(key_of(k));
  inner_->wait(full, timeout);
}
bool PrefixStore::check(const std::vector<std::string> &keys) {
  std::vector<std::string> full;
  for (const auto &k : keys) full.push_back(key_of(k));
  return inner_->check(full);
}
bool PrefixStore::delete_key(const std::string &key) { return inner_->delete_key(key_of(key)); }
int64_t PrefixStore::num_keys() { return inner_->num_keys(); }

} // namespace kiln::runtime::distributed
