// PrefixStore and HashStore (kiln/runtime/distributed/Store.h).
#include "kiln/runtime/distributed/Store.h"

#include <condition_variable>
#include <mutex>

#include "KeyValueTable.h"
#include "StoreFrame.h"

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

struct HashStore::State {
  std::mutex mu;
  std::condition_variable cv;
  KeyValueTable table;
};

HashStore::HashStore() : state_(std::make_unique<State>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string &key, const std::vector<uint8_t> &value) {
  frame::check_keys({key}, "HashStore set");
  frame::check_value(value, "HashStore set('" + key + "')");
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->table.set(key, value);
  }
  state_->cv.notify_all();
}

std::vector<uint8_t> HashStore::get(const std::string &key) {
  frame::check_keys({key}, "HashStore get");
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout_, [&] { return state_->table.find(key) != nullptr; }))
    throw DistributedError(DistributedError::Kind::Timeout, "HashStore get: key '" + key + "' not set after " +
                                                                std::to_string(timeout_.count()) + " ms");
  return *state_->table.find(key);
}

int64_t HashStore::add(const std::string &key, int64_t delta) {
  frame::check_keys({key}, "HashStore add");
  int64_t sum;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    sum = state_->table.add(key, delta, "HashStore");
  }
  state_->cv.notify_all();
  return sum;
}

std::vector<uint8_t> HashStore::compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                            const std::vector<uint8_t> &desired) {
  frame::check_keys({key}, "HashStore compare_set");
  frame::check_value(desired, "HashStore compare_set('" + key + "')");
  bool changed;
  std::vector<uint8_t> now;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    now = state_->table.compare_set(key, expected, desired, &changed);
  }
  if (changed) state_->cv.notify_all();
  return now;
}

void HashStore::wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) {
  frame::check_keys(keys, "HashStore wait");
  std::unique_lock<std::mutex> lock(state_->mu);
  if (state_->cv.wait_for(lock, timeout, [&] { return state_->table.has_all(keys); })) return;
  throw DistributedError(DistributedError::Kind::Timeout, "HashStore wait: keys [" + state_->table.missing(keys) +
                                                              "] not set after " + std::to_string(timeout.count()) +
                                                              " ms");
}

bool HashStore::check(const std::vector<std::string> &keys) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->table.has_all(keys);
}

bool HashStore::delete_key(const std::string &key) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->table.erase(key);
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->table.user_key_count();
}

} // namespace kiln::runtime::distributed
