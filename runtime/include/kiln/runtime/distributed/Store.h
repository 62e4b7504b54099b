// kiln/runtime/distributed/Store.h - the key-value store the ranks of a
// process group meet through (c10d's Store: torch.distributed.Store).
//
// Keys are strings, values bytes. get() and wait() block until the keys
// exist or the store's timeout passes; add() is an atomic counter whose
// value is kept as its decimal text (c10d's convention, so get() on an
// add()ed key reads "3"). Implementations: TCPStore (served by rank 0),
// FileStore (one file on a shared file system), HashStore (one process),
// PrefixStore (a namespace in another store).
//
// Example (rank 0 serves, every rank, rank 0 included, is a client):
//   TCPStoreOptions o;
//   o.host = master_addr; o.port = master_port; o.is_master = rank == 0;
//   auto store = std::make_shared<TCPStore>(o);
//   store->set("rank" + std::to_string(rank), address);
//   std::string peer = store->get_string("rank0"); // blocks until rank 0 set it
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::runtime::distributed {

/// What every failure in distributed/ throws: a timeout, a peer that closed
/// its connection or died, a malformed message, a desync. The message names
/// the operation, the peer or key, and what to do next.
class DistributedError : public std::runtime_error {
public:
  enum class Kind { Timeout, PeerLost, Protocol, Mismatch, Invalid };
  DistributedError(Kind kind, const std::string &msg) : std::runtime_error(msg), kind_(kind) {}
  Kind kind() const { return kind_; }

private:
  Kind kind_;
};

/// The default timeout of stores and process groups (c10d's 300 s is meant
/// for clusters; a test or a loopback job wants an answer sooner).
constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(300)};

/// The bounds every store enforces (TCPStore on the wire, FileStore in its
/// log), so that a length read from a socket or a file is checked before
/// anything is allocated for it. A call over them throws Invalid.
constexpr size_t kMaxKeyBytes = 4096;                ///< bytes of one key
constexpr size_t kMaxValueBytes = size_t{256} << 20; ///< bytes of one value (256 MiB)
constexpr size_t kMaxKeysPerCall = 65536;            ///< keys of one wait() or check()

/// Keys that start with this are the stores' own (TCPStore's worker count,
/// FileStore's finished count): num_keys() does not count them.
constexpr const char *kInternalKeyPrefix = "__kiln_store/";

class Store {
public:
  virtual ~Store() = default;

  /// Sets `key` to `value` (overwrites), waking readers blocked on it.
  virtual void set(const std::string &key, const std::vector<uint8_t> &value) = 0;
  /// The value of `key`, blocking until it is set or timeout() passes
  /// (DistributedError Timeout naming the key).
  virtual std::vector<uint8_t> get(const std::string &key) = 0;
  /// Adds `delta` to the integer at `key` (absent: 0) and returns the sum.
  virtual int64_t add(const std::string &key, int64_t delta) = 0;
  /// Sets `key` to `desired` if its value is `expected` (or if it is absent
  /// and `expected` is empty); returns the value after the call.
  virtual std::vector<uint8_t> compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                           const std::vector<uint8_t> &desired) = 0;
  /// Blocks until every key exists or `timeout` passes (DistributedError
  /// Timeout naming the keys still missing).
  virtual void wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string> &keys) { wait(keys, timeout()); }
  /// True if every key exists now (does not block).
  virtual bool check(const std::vector<std::string> &keys) = 0;
  /// Deletes `key`; true if it existed.
  virtual bool delete_key(const std::string &key) = 0;
  /// How many keys the store holds (not counting kInternalKeyPrefix keys).
  virtual int64_t num_keys() = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  /// Convenience for text values.
  void set(const std::string &key, const std::string &value) { set(key, std::vector<uint8_t>(value.begin(), value.end())); }
  std::string get_string(const std::string &key) {
    auto v = get(key);
    return std::string(v.begin(), v.end());
  }

protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

/// A store whose keys are `prefix + "/" + key` in `inner` (c10d's
/// PrefixStore): process groups made on one store keep apart.
class PrefixStore final : public Store {
public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);
  void set(const std::string &key, const std::vector<uint8_t> &value) override;
  std::vector<uint8_t> get(const std::string &key) override;
  int64_t add(const std::string &key, int64_t delta) override;
  std::vector<uint8_t> compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                   const std::vector<uint8_t> &desired) override;
  void wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string> &keys) override;
  bool delete_key(const std::string &key) override;
  int64_t num_keys() override;
  using Store::set;
  using Store::wait;

private:
  std::string key_of(const std::string &key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

/// An in-process store (c10d's HashStore): ranks that are threads of one
/// process, and tests. Thread-safe; blocking calls wait on a condition
/// variable up to the timeout.
class HashStore final : public Store {
public:
  HashStore();
  ~HashStore() override;
  void set(const std::string &key, const std::vector<uint8_t> &value) override;
  std::vector<uint8_t> get(const std::string &key) override;
  int64_t add(const std::string &key, int64_t delta) override;
  std::vector<uint8_t> compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                   const std::vector<uint8_t> &desired) override;
  void wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string> &keys) override;
  bool delete_key(const std::string &key) override;
  int64_t num_keys() override;
  using Store::set;
  using Store::wait;

private:
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace kiln::runtime::distributed
