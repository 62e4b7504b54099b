// PrefixStore and HashStore (kiln/runtime/distributed/Store.h).
#include "kiln/runtime/distributed/Store.h"

#include <condition_variable>
#include <map>
#include <mutex>

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
  std::map<std::string, std::vector<uint8_t>> data;
};

HashStore::HashStore() : state_(std::make_unique<State>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string &key, const std::vector<uint8_t> &value) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->data[key] = value;
  }
  state_->cv.notify_all();
}

std::vector<uint8_t> HashStore::get(const std::string &key) {
  wait({key}, timeout_);
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->data.at(key);
}

int64_t HashStore::add(const std::string &key, int64_t delta) {
  int64_t sum;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto &v = state_->data[key];
    sum = (v.empty() ? 0 : std::stoll(std::string(v.begin(), v.end()))) + delta;
    const std::string text = std::to_string(sum);
    v.assign(text.begin(), text.end());
  }
  state_->cv.notify_all();
  return sum;
}

std::vector<uint8_t> HashStore::compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                            const std::vector<uint8_t> &desired) {
  std::vector<uint8_t> now;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->data.find(key);
    if (it == state_->data.end()) {
      if (!expected.empty()) return expected; // c10d: an absent key with a non-empty expected is left absent
      state_->data[key] = desired;
      now = desired;
    } else {
      if (it->second == expected) it->second = desired;
      now = it->second;
    }
  }
  state_->cv.notify_all();
  return now;
}

void HashStore::wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  auto all_there = [&] {
    for (const auto &k : keys)
      if (!state_->data.count(k)) return false;
    return true;
  };
  if (state_->cv.wait_for(lock, timeout, all_there)) return;
  std::string missing;
  for (const auto &k : keys)
    if (!state_->data.count(k)) missing += (missing.empty() ? "" : ", ") + k;
  throw DistributedError(DistributedError::Kind::Timeout, "HashStore wait: keys [" + missing + "] not set after " +
                                                              std::to_string(timeout.count()) + " ms");
}

bool HashStore::check(const std::vector<std::string> &keys) {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto &k : keys)
    if (!state_->data.count(k)) return false;
  return true;
}

bool HashStore::delete_key(const std::string &key) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->data.erase(key) > 0;
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return static_cast<int64_t>(state_->data.size());
}

} // namespace kiln::runtime::distributed
