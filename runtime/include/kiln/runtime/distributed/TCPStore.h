// kiln/runtime/distributed/TCPStore.h - the store rank 0 serves over TCP
// (c10d's TCPStore, torch.distributed.TCPStore).
//
// The master (is_master) listens on host:port and answers every client,
// itself included, from one poll() thread: a get() or wait() on a key that
// is not set yet is parked there and answered when it is set, so the server
// never blocks on one client. Messages are length-prefixed with a magic
// number; a key is at most kMaxKeyBytes, a value kMaxValueBytes, a message
// kMaxFields fields: anything else (a bad magic, a length claiming 2^60
// bytes, an unknown operation) closes that connection only, without
// allocating what it claims; stored data and other clients are untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/runtime/distributed/Store.h"

namespace kiln::runtime::distributed {

constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxValueBytes = size_t{256} << 20;
constexpr size_t kMaxFields = 65536 + 1;

struct TCPStoreOptions {
  std::string host = "127.0.0.1"; ///< the master's address (MASTER_ADDR)
  uint16_t port = 0;              ///< MASTER_PORT; 0 on the master: an ephemeral port (see port())
  bool is_master = false;         ///< serve the store (rank 0)
  /// When > 0, the constructor returns once this many TCPStores (the
  /// master's own included) have connected, or throws Timeout.
  int num_workers = -1;
  std::chrono::milliseconds timeout = kDefaultTimeout; ///< connect, get, wait
};

/// Throws DistributedError: Invalid when the master cannot listen (port in
/// use), Timeout when the master is not reachable in time (naming host:port
/// and what to check), PeerLost when the connection drops later.
class TCPStore final : public Store {
public:
  explicit TCPStore(const TCPStoreOptions &options);
  ~TCPStore() override;
  /// The port the master listens on (the bound one when options.port was 0).
  uint16_t port() const { return port_; }

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

  class Server;

private:
  using Fields = std::vector<std::vector<uint8_t>>;
  /// One request and its reply; `deadline_ms` < 0: the store's timeout.
  Fields call(uint8_t op, const Fields &fields, const std::string &what, std::chrono::milliseconds timeout);
  void connect_locked(std::chrono::milliseconds timeout);

  TCPStoreOptions options_;
  uint16_t port_ = 0;
  std::unique_ptr<Server> server_;
  std::mutex mu_;
  int fd_ = -1;
};

} // namespace kiln::runtime::distributed
