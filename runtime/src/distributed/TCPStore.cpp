// TCPStore (kiln/runtime/distributed/TCPStore.h), after c10d's TCPStore:
// a poll() server thread in the master and a blocking client per store.
//
// Wire format (both directions): u32 magic, u8 op (reply: status), u32 field
// count, then per field a u64 length and its bytes. All little-endian host
// order (the ranks of a job run the same binary).
#include "kiln/runtime/distributed/TCPStore.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

namespace kiln::runtime::distributed {

using Kind = DistributedError::Kind;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMagic = 0x4b4c5331; // "KLS1"
constexpr size_t kHeaderBytes = 4 + 1 + 4;
enum Op : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait, kCheck, kDelete, kNumKeys };
enum Status : uint8_t { kOk = 0, kBadRequest = 1 };

using Fields = std::vector<std::vector<uint8_t>>;

std::vector<uint8_t> bytes_of(const std::string &s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<uint8_t> &v) { return {v.begin(), v.end()}; }

std::vector<uint8_t> encode(uint8_t op, const Fields &fields) {
  std::vector<uint8_t> out(kHeaderBytes);
  const uint32_t n = static_cast<uint32_t>(fields.size());
  std::memcpy(out.data(), &kMagic, 4);
  out[4] = op;
  std::memcpy(out.data() + 5, &n, 4);
  for (const auto &f : fields) {
    const uint64_t len = f.size();
    const size_t at = out.size();
    out.resize(at + 8 + f.size());
    std::memcpy(out.data() + at, &len, 8);
    if (!f.empty()) std::memcpy(out.data() + at + 8, f.data(), f.size());
  }
  return out;
}

/// Parses one message at the front of `buf`. Returns 0 when more bytes are
/// needed, the message's length when complete, -1 when malformed (`why`).
/// Checks every length against the bounds before trusting it.
long long decode(const std::vector<uint8_t> &buf, uint8_t *op, Fields *fields, std::string *why) {
  if (buf.size() < kHeaderBytes) return 0;
  uint32_t magic, n;
  std::memcpy(&magic, buf.data(), 4);
  std::memcpy(&n, buf.data() + 5, 4);
  if (magic != kMagic) return *why = "bad magic", -1;
  if (n > kMaxFields) return *why = "field count " + std::to_string(n) + " over " + std::to_string(kMaxFields), -1;
  size_t at = kHeaderBytes;
  Fields out;
  for (uint32_t i = 0; i < n; ++i) {
    if (buf.size() < at + 8) return 0;
    uint64_t len;
    std::memcpy(&len, buf.data() + at, 8);
    if (len > kMaxValueBytes) return *why = "field length " + std::to_string(len) + " over " + std::to_string(kMaxValueBytes), -1;
    at += 8;
    if (at + len > kMaxValueBytes + kMaxKeyBytes * 2 + (size_t{1} << 20))
      return *why = "message of more than " + std::to_string(kMaxValueBytes) + " bytes", -1;
    if (buf.size() < at + len) return 0;
    out.emplace_back(buf.begin() + static_cast<long>(at), buf.begin() + static_cast<long>(at + len));
    at += len;
  }
  *op = buf[4];
  *fields = std::move(out);
  return static_cast<long long>(at);
}

bool send_all(int fd, const std::vector<uint8_t> &data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t k = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    sent += static_cast<size_t>(k);
  }
  return true;
}

std::string errno_text() { return std::strerror(errno); }

/// True for TCP's self-connect: a client connecting to a port in the
/// ephemeral range on its own host before the master listens can be given
/// that very port as its source, and then talks to itself.
bool self_connected(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t a = sizeof self, b = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&self), &a) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &b) != 0)
    return false;
  if (a != b || std::memcmp(&self, &peer, a) != 0) return false;
  errno = ECONNREFUSED;
  return true;
}

} // namespace

// ---- the server ---------------------------------------------------------------

class TCPStore::Server {
public:
  Server(const std::string &host, uint16_t port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw DistributedError(Kind::Invalid, "TCPStore: socket() failed: " + errno_text());
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_ANY); // the master address may name any interface of this node
    (void)host;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || ::listen(listen_fd_, 256) != 0) {
      const std::string why = errno_text();
      ::close(listen_fd_);
      throw DistributedError(Kind::Invalid, "TCPStore: cannot listen on port " + std::to_string(port) + ": " + why +
                                                " (another job on this port? choose another MASTER_PORT)");
    }
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw DistributedError(Kind::Invalid, "TCPStore: pipe2 failed");
    thread_ = std::thread([this] { loop(); });
  }

  ~Server() {
    const char c = 'x';
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (auto &[fd, client] : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  uint16_t port() const { return port_; }

private:
  struct Client {
    std::vector<uint8_t> in;
  };
  struct Waiter {
    int fd;
    uint8_t op; // kGet or kWait
    std::vector<std::string> keys;
  };

  void loop() {
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto &[fd, c] : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          clients_[fd];
        }
      }
      // A connection dropped earlier in this round (a failed reply to a
      // waiter) is skipped: its number may already belong to another socket.
      for (size_t i = 2; i < fds.size(); ++i)
        if (fds[i].revents && clients_.count(fds[i].fd)) read_from(fds[i].fd);
    }
  }

  void drop(int fd, const std::string &why) {
    if (!why.empty()) std::fprintf(stderr, "kiln TCPStore: closing a client connection: %s\n", why.c_str());
    ::close(fd);
    clients_.erase(fd);
    for (size_t i = waiters_.size(); i-- > 0;)
      if (waiters_[i].fd == fd) waiters_.erase(waiters_.begin() + static_cast<long>(i));
  }

  void read_from(int fd) {
    uint8_t chunk[65536];
    const ssize_t k = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) return drop(fd, "");
    if (k < 0) return;
    auto &in = clients_[fd].in;
    in.insert(in.end(), chunk, chunk + k);
    for (;;) {
      uint8_t op;
      Fields fields;
      std::string why;
      const long long used = decode(in, &op, &fields, &why);
      if (used < 0) return drop(fd, why);
      if (used == 0) return;
      in.erase(in.begin(), in.begin() + static_cast<long>(used));
      if (!handle(fd, op, fields, &why)) return drop(fd, why);
    }
  }

  bool reply(int fd, const Fields &fields) { return send_all(fd, encode(kOk, fields)); }

  bool all_set(const std::vector<std::string> &keys) const {
    for (const auto &k : keys)
      if (!data_.count(k)) return false;
    return true;
  }

  /// Answers the parked get/wait calls whose keys are all set now.
  void wake_waiters() {
    for (size_t i = 0; i < waiters_.size();) {
      Waiter &w = waiters_[i];
      if (!all_set(w.keys)) {
        ++i;
        continue;
      }
      const Waiter done = w;
      waiters_.erase(waiters_.begin() + static_cast<long>(i));
      if (!reply(done.fd, done.op == kGet ? Fields{data_[done.keys[0]]} : Fields{})) drop(done.fd, "");
    }
  }

  bool handle(int fd, uint8_t op, Fields &f, std::string *why) {
    auto key_ok = [&](size_t i) {
      if (i >= f.size()) return *why = "missing field", false;
      if (f[i].size() > kMaxKeyBytes) return *why = "key of " + std::to_string(f[i].size()) + " bytes", false;
      return true;
    };
    auto nfields = [&](size_t n) {
      if (f.size() != n) return *why = "op " + std::to_string(op) + " with " + std::to_string(f.size()) + " fields", false;
      return true;
    };
    switch (op) {
    case kSet:
      if (!nfields(2) || !key_ok(0)) return false;
      data_[text_of(f[0])] = std::move(f[1]);
      wake_waiters();
      return reply(fd, {});
    case kGet:
    case kWait: {
      if (op == kGet ? !nfields(1) : f.empty()) return *why = "no keys", false;
      std::vector<std::string> keys;
      for (size_t i = 0; i < f.size(); ++i) {
        if (!key_ok(i)) return false;
        keys.push_back(text_of(f[i]));
      }
      if (all_set(keys)) return reply(fd, op == kGet ? Fields{data_[keys[0]]} : Fields{});
      waiters_.push_back({fd, op, std::move(keys)});
      return true;
    }
    case kAdd: {
      if (!nfields(2) || !key_ok(0)) return false;
      char *end = nullptr;
      const std::string d = text_of(f[1]);
      const long long delta = std::strtoll(d.c_str(), &end, 10);
      if (d.empty() || *end) return *why = "add of a non-integer", false;
      auto &v = data_[text_of(f[0])];
      const std::string old = text_of(v);
      const long long sum = (old.empty() ? 0 : std::strtoll(old.c_str(), nullptr, 10)) + delta;
      v = bytes_of(std::to_string(sum));
      const Fields out{v};
      wake_waiters();
      return reply(fd, out);
    }
    case kCompareSet: {
      if (!nfields(3) || !key_ok(0)) return false;
      const std::string key = text_of(f[0]);
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (!f[1].empty()) return reply(fd, {f[1]});
        data_[key] = f[2];
        wake_waiters();
        return reply(fd, {f[2]});
      }
      if (it->second == f[1]) {
        it->second = f[2];
        wake_waiters();
      }
      return reply(fd, {data_[key]});
    }
    case kCheck: {
      std::vector<std::string> keys;
      for (size_t i = 0; i < f.size(); ++i) {
        if (!key_ok(i)) return false;
        keys.push_back(text_of(f[i]));
      }
      return reply(fd, {bytes_of(all_set(keys) ? "1" : "0")});
    }
    case kDelete:
      if (!nfields(1) || !key_ok(0)) return false;
      return reply(fd, {bytes_of(data_.erase(text_of(f[0])) ? "1" : "0")});
    case kNumKeys:
      if (!nfields(0)) return false;
      return reply(fd, {bytes_of(std::to_string(data_.size()))});
    default: return *why = "unknown operation " + std::to_string(op), false;
    }
  }

  int listen_fd_ = -1, wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::map<int, Client> clients_;
  std::map<std::string, std::vector<uint8_t>> data_;
  std::vector<Waiter> waiters_;
  std::thread thread_;
};

// ---- the client ---------------------------------------------------------------

TCPStore::TCPStore(const TCPStoreOptions &options) : options_(options) {
  timeout_ = options.timeout;
  port_ = options.port;
  if (options.is_master) {
    server_ = std::make_unique<Server>(options.host, options.port);
    port_ = server_->port();
  } else if (port_ == 0) {
    throw DistributedError(Kind::Invalid, "TCPStore: a client needs the master's port (MASTER_PORT), got 0");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    connect_locked(timeout_);
  }
  if (options.num_workers > 0) {
    add("__kiln_store_workers", 1);
    const auto deadline = Clock::now() + timeout_;
    for (int64_t n = add("__kiln_store_workers", 0); n < options.num_workers; n = add("__kiln_store_workers", 0)) {
      if (Clock::now() > deadline)
        throw DistributedError(Kind::Timeout, "TCPStore " + options.host + ":" + std::to_string(port_) + ": " +
                                                  std::to_string(n) + " of " + std::to_string(options.num_workers) +
                                                  " ranks arrived within " + std::to_string(timeout_.count()) +
                                                  " ms; did every rank start with the same MASTER_ADDR/MASTER_PORT?");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

TCPStore::~TCPStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

void TCPStore::connect_locked(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string where = options_.host + ":" + std::to_string(port_);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(options_.host.c_str(), std::to_string(port_).c_str(), &hints, &res) != 0 || !res)
    throw DistributedError(Kind::Invalid, "TCPStore: cannot resolve the master address " + where + " (MASTER_ADDR)");
  std::string last = "no attempt";
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 && !self_connected(fd)) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      fd_ = fd;
      ::freeaddrinfo(res);
      return;
    }
    last = errno_text();
    if (fd >= 0) ::close(fd);
    if (Clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::freeaddrinfo(res);
  throw DistributedError(Kind::Timeout, "TCPStore: cannot reach the master at " + where + " within " +
                                            std::to_string(timeout.count()) + " ms (" + last +
                                            "); is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on every rank?");
}

TCPStore::Fields TCPStore::call(uint8_t op, const Fields &fields, const std::string &what,
                                std::chrono::milliseconds timeout) {
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].size() > kMaxValueBytes)
      throw DistributedError(Kind::Invalid, "TCPStore " + what + ": a value of " + std::to_string(fields[i].size()) +
                                                " bytes (at most " + std::to_string(kMaxValueBytes) + ")");
  std::lock_guard<std::mutex> lock(mu_);
  const std::string where = options_.host + ":" + std::to_string(port_);
  if (fd_ < 0) connect_locked(timeout_);
  auto lost = [&](const std::string &why) {
    ::close(fd_);
    fd_ = -1;
    return DistributedError(Kind::PeerLost, "TCPStore " + what + ": the connection to the master at " + where +
                                                " was lost (" + why + "); rank 0 may have exited, see its output");
  };
  if (!send_all(fd_, encode(op, fields))) throw lost(errno_text());
  const auto deadline = Clock::now() + timeout;
  std::vector<uint8_t> buf;
  for (;;) {
    uint8_t status;
    Fields out;
    std::string why;
    const long long used = decode(buf, &status, &out, &why);
    if (used < 0) throw lost("a malformed reply: " + why);
    if (used > 0) {
      if (status != kOk) throw lost("the master rejected the request");
      return out;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd_, POLLIN, 0};
    const int r = left > 0 ? ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30))) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      // The master still holds the parked request: a new connection keeps
      // its late answer from being read as the reply to the next call.
      ::close(fd_);
      fd_ = -1;
      throw DistributedError(Kind::Timeout, "TCPStore " + what + ": no answer from " + where + " within " +
                                                std::to_string(timeout.count()) + " ms");
    }
    uint8_t chunk[65536];
    const ssize_t k = ::recv(fd_, chunk, sizeof chunk, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw lost(k == 0 ? "closed" : errno_text());
    buf.insert(buf.end(), chunk, chunk + k);
  }
}

void TCPStore::set(const std::string &key, const std::vector<uint8_t> &value) {
  call(kSet, {bytes_of(key), value}, "set('" + key + "')", timeout_);
}

std::vector<uint8_t> TCPStore::get(const std::string &key) {
  try {
    return call(kGet, {bytes_of(key)}, "get('" + key + "')", timeout_).at(0);
  } catch (const DistributedError &e) {
    if (e.kind() != Kind::Timeout) throw;
    throw DistributedError(Kind::Timeout, std::string(e.what()) + ": key '" + key + "' was not set");
  }
}

int64_t TCPStore::add(const std::string &key, int64_t delta) {
  return std::stoll(text_of(call(kAdd, {bytes_of(key), bytes_of(std::to_string(delta))}, "add('" + key + "')", timeout_).at(0)));
}

std::vector<uint8_t> TCPStore::compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                           const std::vector<uint8_t> &desired) {
  return call(kCompareSet, {bytes_of(key), expected, desired}, "compare_set('" + key + "')", timeout_).at(0);
}

void TCPStore::wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return;
  Fields f;
  std::string names;
  for (const auto &k : keys) {
    f.push_back(bytes_of(k));
    names += (names.empty() ? "'" : ", '") + k + "'";
  }
  call(kWait, f, "wait([" + names + "])", timeout);
}

bool TCPStore::check(const std::vector<std::string> &keys) {
  Fields f;
  for (const auto &k : keys) f.push_back(bytes_of(k));
  return text_of(call(kCheck, f, "check", timeout_).at(0)) == "1";
}

bool TCPStore::delete_key(const std::string &key) {
  return text_of(call(kDelete, {bytes_of(key)}, "delete_key('" + key + "')", timeout_).at(0)) == "1";
}

int64_t TCPStore::num_keys() { return std::stoll(text_of(call(kNumKeys, {}, "num_keys", timeout_).at(0))); }

} // namespace kiln::runtime::distributed
