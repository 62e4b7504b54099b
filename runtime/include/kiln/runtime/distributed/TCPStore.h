// kiln/runtime/distributed/TCPStore.h - the store rank 0 serves over TCP
// (c10d's TCPStore, torch.distributed.TCPStore).
//
// The master (is_master) listens on the port and answers every client,
// itself included, from one poll() thread that never blocks on one client:
// a get() or wait() on a key not set yet is parked there and answered when
// the key is set; replies leave through a per-connection buffer. Requests
// and replies are StoreFrame frames (a magic number, a version, the body's
// length, bounded fields: kMaxKeyBytes, kMaxValueBytes, kMaxKeysPerCall);
// a malformed one (a bad magic, an unknown op, a length claiming 2^60
// bytes) closes that connection only, with one line on stderr and nothing
// allocated for what it claims; the stored data and the other clients are
// untouched.
//
// Example:
//   TCPStoreOptions o;
//   o.host = "10.0.0.1"; o.port = 29500; o.is_master = rank == 0; o.num_workers = world_size;
//   TCPStore store(o);            // rank 0: returns once world_size stores have connected
//   store.add("arrived", 1);
//   store.wait({"go"}, std::chrono::seconds(30));
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/runtime/distributed/Store.h"

namespace kiln::runtime::distributed {

struct TCPStoreOptions {
  std::string host = "127.0.0.1"; ///< the master's address (MASTER_ADDR); a client connects to it
  uint16_t port = 0;              ///< MASTER_PORT; 0 on the master: an ephemeral port (see port())
  bool is_master = false;         ///< serve the store (rank 0)
  /// On the master, when > 0: the constructor returns once this many
  /// TCPStores (its own included) have connected, or throws Timeout.
  int num_workers = -1;
  /// Connecting, waiting for the workers, and every get/wait (set_timeout
  /// changes the latter), in milliseconds.
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

/// A Store served by the master's thread. Thread-safe: threads share the
/// one connection of a TCPStore, one call at a time.
///
/// Throws DistributedError: Invalid when the master cannot listen (the port
/// is taken), when a key or value is over its bound, or when add() meets a
/// value that is not an integer, or when this node has no route to the
/// master's address (ENETUNREACH: waiting would not help); Timeout when the master is not reachable
/// within the timeout (naming host:port and what to check: MASTER_ADDR,
/// MASTER_PORT, is rank 0 running) or a call is not answered in time
/// (naming the operation and its keys); PeerLost when the connection to the
/// master drops (naming host:port). After a Timeout or PeerLost the next
/// call connects again.
///
/// The master listens on every interface of its node, as c10d's does:
/// MASTER_ADDR may name this node by an address that resolves differently
/// here (a loopback alias in /etc/hosts) than on the other nodes.
class TCPStore final : public Store {
public:
  explicit TCPStore(const TCPStoreOptions &options);
  /// Closes the connection; on the master also stops the server (its
  /// clients then get PeerLost).
  ~TCPStore() override;
  /// The port the master listens on (the bound one when options.port was 0).
  uint16_t port() const { return port_; }
  /// This store's end of its connection to the master (getsockname): the
  /// IPv4 address of the interface this node reaches the master through,
  /// "127.0.0.1" when the master's address is loopback. The address
  /// other nodes reach this one at (choose_gloo_hostname uses it, as c10d's
  /// ProcessGroupGloo does).
  std::string local_address();

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
  /// Sends one request and reads its reply within `timeout`. `what` names
  /// the call in errors; `unanswered` says what a timeout means.
  Fields call(uint8_t op, const Fields &fields, const std::string &what, std::chrono::milliseconds timeout,
              const std::string &unanswered);
  void connect_locked(std::chrono::milliseconds timeout);
  void close_locked();
  void wait_for_workers();
  std::string address() const { return options_.host + ":" + std::to_string(port_); }

  TCPStoreOptions options_;
  uint16_t port_ = 0;
  std::unique_ptr<Server> server_;
  std::mutex mu_;
  int fd_ = -1;
  std::string local_address_; ///< of the last connection (getsockname)
};

} // namespace kiln::runtime::distributed
