// TCPStore (kiln/runtime/distributed/TCPStore.h), after c10d's TCPStore: a
// poll() server thread in the master and one non-blocking client socket per
// store. Requests and replies are StoreFrame frames.
//
// Requests (op: fields):            replies (kOk unless said):
//   kSet: key, value                  -
//   kGet: key                         value (parked until the key is set)
//   kAdd: key, i64 delta              i64 sum; kError: message
//   kCompareSet: key, expected, desired   value after
//   kWait: key...                     - (parked until every key is set)
//   kCheck: key...                    u8 1/0
//   kDelete: key                      u8 1/0
//   kNumKeys: -                       i64 count
#include "kiln/runtime/distributed/TCPStore.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "KeyValueTable.h"
#include "StoreFrame.h"

namespace kiln::runtime::distributed {

using Kind = DistributedError::Kind;
using Clock = std::chrono::steady_clock;
using frame::Fields;
using frame::Shape;

namespace {

enum Op : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kWait, kCheck, kDelete, kNumKeys };
enum Status : uint8_t { kOk = 0, kError = 1 };

/// Every TCPStore adds 1 here when it connects; the master's constructor
/// waits for num_workers (c10d's init key).
const std::string kWorkersKey = std::string(kInternalKeyPrefix) + "workers";

/// The recv() chunk: large enough that a 256 MiB value is 1024 reads.
constexpr size_t kReadChunkBytes = size_t{256} << 10;
/// How long one connect() attempt may take, and the pause between attempts
/// while the master is not up yet.
constexpr int kConnectAttemptMs = 1000;
constexpr auto kConnectRetryPause = std::chrono::milliseconds(20);
/// The master's poll interval while it waits for num_workers.
constexpr auto kWorkerPollPause = std::chrono::milliseconds(10);

Shape request_shape(uint8_t op) {
  switch (op) {
  case kSet:
    return {true, 2, 2, 0b10};
  case kGet:
    return {true, 1, 1, 0};
  case kAdd:
    return {true, 2, 2, 0b10};
  case kCompareSet:
    return {true, 3, 3, 0b110};
  case kWait:
    return {true, 1, kMaxKeysPerCall, 0};
  case kCheck:
    return {true, 1, kMaxKeysPerCall, 0};
  case kDelete:
    return {true, 1, 1, 0};
  case kNumKeys:
    return {true, 0, 0, 0};
  default:
    return {};
  }
}

Shape reply_shape(uint8_t status) {
  if (status == kOk)
    return {true, 0, 1, 0b1};
  if (status == kError)
    return {true, 1, 1, 0b1};
  return {};
}

std::vector<uint8_t> bytes_of(const std::string &s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<uint8_t> &v) { return {v.begin(), v.end()}; }

std::vector<uint8_t> int64_bytes(int64_t v) {
  std::vector<uint8_t> out(8);
  std::memcpy(out.data(), &v, 8);
  return out;
}

int64_t int64_of(const std::vector<uint8_t> &v, const std::string &what) {
  if (v.size() != 8)
    throw DistributedError(Kind::Protocol,
                           "TCPStore " + what + ": an integer of " + std::to_string(v.size()) + " bytes");
  int64_t out;
  std::memcpy(&out, v.data(), 8);
  return out;
}

Fields flag_reply(bool b) { return {std::vector<uint8_t>{uint8_t(b ? 1 : 0)}}; }

std::string errno_text() { return std::strerror(errno); }

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

/// True for TCP's self-connect: a client connecting to a port in the
/// ephemeral range on its own host before the master listens can be given
/// that very port as its source, and then talks to itself.
bool self_connected(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t a = sizeof self, b = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&self), &a) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &b) != 0)
    return false;
  return a == b && std::memcmp(&self, &peer, a) == 0;
}

/// The IPv4 address of a connected socket's own end ("" if unknown).
std::string local_address_of(int fd) {
  sockaddr_in self{};
  socklen_t len = sizeof self;
  char ip[INET_ADDRSTRLEN] = "";
  if (::getsockname(fd, reinterpret_cast<sockaddr *>(&self), &len) != 0 || self.sin_family != AF_INET ||
      !::inet_ntop(AF_INET, &self.sin_addr, ip, sizeof ip))
    return "";
  return ip;
}

/// One non-blocking connect() to `addr`, up to `wait_ms`; the socket
/// (non-blocking, TCP_NODELAY) or -1 with `*why` and `*error` (errno).
int connect_once(const addrinfo &addr, int wait_ms, std::string *why, int *error) {
  const int fd = ::socket(addr.ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return *error = errno, *why = errno_text(), -1;
  int &err = *error; // what the caller reads
  err = 0;
  if (::connect(fd, addr.ai_addr, addr.ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      err = ::poll(&p, 1, wait_ms) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : ETIMEDOUT;
    }
  }
  if (err == 0 && self_connected(fd))
    err = ECONNREFUSED; // nothing listens yet: try again
  if (err != 0) {
    *why = std::strerror(err);
    ::close(fd);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

} // namespace

// ---- the server ---------------------------------------------------------------

class TCPStore::Server {
public:
  explicit Server(uint16_t port);
  ~Server();
  uint16_t port() const { return port_; }

private:
  struct Connection {
    std::string peer;         ///< "address:port", for the log
    std::vector<uint8_t> in;  ///< received bytes not yet served
    std::vector<uint8_t> out; ///< reply bytes not yet sent
    size_t out_sent = 0;
  };
  /// A get or wait whose keys are not all set yet.
  struct Waiter {
    int fd;
    uint8_t op;
    std::vector<std::string> keys;
  };

  void loop();
  std::vector<pollfd> poll_set() const;
  void accept_clients();
  void receive(int fd);
  void flush(int fd);
  void serve_buffered(int fd);
  void drop(int fd, const std::string &why);
  bool handle(int fd, uint8_t op, Fields &fields, std::string *why);
  void reply(int fd, Status status, const Fields &fields);
  void answer_when_set(int fd, uint8_t op, std::vector<std::string> keys);
  void answer(const Waiter &w);
  void wake_waiters();

  int listen_fd_ = -1, wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::map<int, Connection> connections_;
  std::vector<Waiter> waiters_;
  KeyValueTable table_;
  std::vector<uint8_t> chunk_ = std::vector<uint8_t>(kReadChunkBytes);
  std::thread thread_;
};

TCPStore::Server::Server(uint16_t port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0)
    throw DistributedError(Kind::Invalid, "TCPStore: socket() failed: " + errno_text());
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || ::listen(listen_fd_, SOMAXCONN) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&a), &len) != 0 || ::pipe2(wake_, O_CLOEXEC) != 0) {
    const std::string why = errno_text();
    ::close(listen_fd_);
    throw DistributedError(Kind::Invalid, "TCPStore: the master cannot listen on port " + std::to_string(port) + ": " +
                                              why + " (another job on this port? choose another MASTER_PORT)");
  }
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { loop(); });
}

TCPStore::Server::~Server() {
  const char stop = 's';
  (void)!::write(wake_[1], &stop, 1); // the self-pipe: poll() returns, loop() ends
  thread_.join();
  for (auto &[fd, c] : connections_)
    ::close(fd);
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TCPStore::Server::loop() {
  for (;;) {
    std::vector<pollfd> fds = poll_set();
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR)
        continue;
      std::fprintf(stderr, "kiln TCPStore: the server stops: poll failed: %s\n", errno_text().c_str());
      return;
    }
    if (fds[0].revents)
      return;
    if (fds[1].revents & POLLIN)
      accept_clients();
    for (size_t i = 2; i < fds.size(); ++i) {
      const int fd = fds[i].fd;
      if (!fds[i].revents || !connections_.count(fd))
        continue; // dropped while serving another
      if (fds[i].revents & POLLOUT)
        flush(fd);
      else
        receive(fd); // POLLIN, POLLHUP, POLLERR: recv() tells which
    }
  }
}

/// The wake pipe, the listening socket, then each connection: writable
/// while a reply is pending, else readable (a client that does not read
/// its replies is not read from: its buffers stay one frame each).
std::vector<pollfd> TCPStore::Server::poll_set() const {
  std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
  for (const auto &[fd, c] : connections_)
    fds.push_back({fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
  return fds;
}

void TCPStore::Server::accept_clients() {
  for (;;) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr *>(&a), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
      return; // EAGAIN: none left; anything else: the client went away first
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    connections_[fd].peer = std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
  }
}

void TCPStore::Server::receive(int fd) {
  const ssize_t k = ::recv(fd, chunk_.data(), chunk_.size(), MSG_DONTWAIT);
  if (k < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (k <= 0)
    return drop(fd, ""); // closed (or reset): a client leaving is not news
  auto &in = connections_[fd].in;
  in.insert(in.end(), chunk_.begin(), chunk_.begin() + k);
  serve_buffered(fd);
}

void TCPStore::Server::flush(int fd) {
  Connection &c = connections_[fd];
  const ssize_t k = ::send(fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (k < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (k < 0)
    return drop(fd, "");
  c.out_sent += static_cast<size_t>(k);
  if (c.out_sent < c.out.size())
    return;
  std::vector<uint8_t>().swap(c.out); // a 256 MiB reply does not stay allocated
  c.out_sent = 0;
  serve_buffered(fd); // requests that arrived behind the one just answered
}

/// Serves the complete requests at the front of the connection's input, one
/// at a time: a request waits while the reply before it is being sent.
void TCPStore::Server::serve_buffered(int fd) {
  for (;;) {
    auto it = connections_.find(fd);
    if (it == connections_.end() || !it->second.out.empty())
      return;
    auto &in = it->second.in;
    frame::Header header;
    Fields fields;
    size_t used = 0;
    std::string why;
    switch (frame::decode(in.data(), in.size(), request_shape, &header, &fields, &used, &why)) {
    case frame::Decoded::NeedMore:
      return;
    case frame::Decoded::Malformed:
      return drop(fd, why);
    case frame::Decoded::Complete:
      break;
    }
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(used));
    if (in.empty() && in.capacity() > kReadChunkBytes)
      std::vector<uint8_t>().swap(in); // nor a 256 MiB request
    if (!handle(fd, header.op, fields, &why))
      return drop(fd, why);
  }
}

void TCPStore::Server::drop(int fd, const std::string &why) {
  auto it = connections_.find(fd);
  if (it == connections_.end())
    return;
  if (!why.empty())
    std::fprintf(stderr, "kiln TCPStore (port %u): closing the connection from %s: %s\n", port_,
                 it->second.peer.c_str(), why.c_str());
  ::close(fd);
  connections_.erase(it);
  waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), [&](const Waiter &w) { return w.fd == fd; }),
                 waiters_.end());
}

void TCPStore::Server::reply(int fd, Status status, const Fields &fields) {
  auto it = connections_.find(fd);
  if (it == connections_.end())
    return;
  const auto bytes = frame::encode(status, fields);
  it->second.out.insert(it->second.out.end(), bytes.begin(), bytes.end()); // sent when poll() says writable
}

/// Answers a get/wait now when its keys are set, else parks it.
void TCPStore::Server::answer_when_set(int fd, uint8_t op, std::vector<std::string> keys) {
  Waiter w{fd, op, std::move(keys)};
  if (table_.has_all(w.keys))
    answer(w);
  else
    waiters_.push_back(std::move(w));
}

void TCPStore::Server::answer(const Waiter &w) {
  reply(w.fd, kOk, w.op == kGet ? Fields{*table_.find(w.keys[0])} : Fields{});
}

void TCPStore::Server::wake_waiters() {
  std::vector<Waiter> ready;
  for (size_t i = 0; i < waiters_.size();) {
    if (!table_.has_all(waiters_[i].keys)) {
      ++i;
      continue;
    }
    ready.push_back(std::move(waiters_[i]));
    waiters_.erase(waiters_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  for (const Waiter &w : ready)
    answer(w);
}

/// One request. False (with `why`) for a request that breaks the protocol;
/// the caller then closes the connection.
bool TCPStore::Server::handle(int fd, uint8_t op, Fields &f, std::string *why) {
  std::vector<std::string> keys;
  for (const auto &field : f)
    keys.push_back(text_of(field)); // the values among them are not used as keys
  switch (op) {
  case kSet:
    table_.set(keys[0], std::move(f[1]));
    wake_waiters();
    reply(fd, kOk, {});
    return true;
  case kGet:
  case kWait:
    answer_when_set(fd, op, std::move(keys));
    return true;
  case kAdd:
    if (f[1].size() != 8)
      return *why = "add with a delta of " + std::to_string(f[1].size()) + " bytes", false;
    try {
      const int64_t sum = table_.add(keys[0], int64_of(f[1], "add"), "TCPStore");
      wake_waiters();
      reply(fd, kOk, {int64_bytes(sum)});
    } catch (const DistributedError &e) {
      reply(fd, kError, {bytes_of(e.what())});
    }
    return true;
  case kCompareSet: {
    bool changed;
    const auto now = table_.compare_set(keys[0], f[1], f[2], &changed);
    if (changed)
      wake_waiters();
    reply(fd, kOk, {now});
    return true;
  }
  case kCheck:
    reply(fd, kOk, flag_reply(table_.has_all(keys)));
    return true;
  case kDelete:
    reply(fd, kOk, flag_reply(table_.erase(keys[0])));
    return true;
  case kNumKeys:
    reply(fd, kOk, {int64_bytes(table_.user_key_count())});
    return true;
  default:
    return *why = "unknown operation " + std::to_string(op), false; // request_shape lets none through
  }
}

// ---- the client ---------------------------------------------------------------

TCPStore::TCPStore(const TCPStoreOptions &options) : options_(options), port_(options.port) {
  timeout_ = options.timeout;
  if (options.is_master) {
    server_ = std::make_unique<Server>(options.port);
    port_ = server_->port();
  } else if (port_ == 0) {
    throw DistributedError(Kind::Invalid, "TCPStore: a client needs the master's port (MASTER_PORT), got 0");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    connect_locked(timeout_);
  }
  try {
    add(kWorkersKey, 1);
    if (options.is_master && options.num_workers > 0)
      wait_for_workers();
  } catch (...) {
    close_locked(); // no destructor runs for a constructor that throws
    throw;
  }
}

TCPStore::~TCPStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    close_locked();
  }
  server_.reset();
}

void TCPStore::wait_for_workers() {
  const auto deadline = Clock::now() + timeout_;
  for (int64_t n = add(kWorkersKey, 0); n < options_.num_workers; n = add(kWorkersKey, 0)) {
    if (Clock::now() > deadline)
      throw DistributedError(Kind::Timeout, "TCPStore " + address() + ": " + std::to_string(n) + " of " +
                                                std::to_string(options_.num_workers) + " ranks connected within " +
                                                std::to_string(timeout_.count()) +
                                                " ms; did every rank start, with the same MASTER_ADDR/MASTER_PORT?");
    std::this_thread::sleep_for(kWorkerPollPause);
  }
}

void TCPStore::connect_locked(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(options_.host.c_str(), std::to_string(port_).c_str(), &hints, &res) != 0 || !res)
    throw DistributedError(Kind::Invalid,
                           "TCPStore: cannot resolve the master's address " + address() + " (check MASTER_ADDR)");
  std::string why;
  int err = 0;
  do {
    fd_ = connect_once(*res, std::min(ms_until(deadline), kConnectAttemptMs), &why, &err);
    if (fd_ >= 0 || err == ENETUNREACH)
      break;
    std::this_thread::sleep_for(kConnectRetryPause); // the master may not be up yet
  } while (Clock::now() < deadline);
  ::freeaddrinfo(res);
  if (fd_ < 0 && err == ENETUNREACH) // no route: waiting does not help
    throw DistributedError(Kind::Invalid, "TCPStore: the master's address " + address() +
                                              " is unreachable from this node (" + why +
                                              "); check MASTER_ADDR and this node's network (ip route)");
  if (fd_ >= 0)
    local_address_ = local_address_of(fd_);
  if (fd_ < 0)
    throw DistributedError(Kind::Timeout, "TCPStore: cannot reach the master at " + address() + " within " +
                                              std::to_string(timeout.count()) + " ms (" + why +
                                              "); is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on "
                                              "every rank?");
}

std::string TCPStore::local_address() {
  std::lock_guard<std::mutex> lock(mu_);
  return local_address_;
}

void TCPStore::close_locked() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

TCPStore::Fields TCPStore::call(uint8_t op, const Fields &fields, const std::string &what,
                                std::chrono::milliseconds timeout, const std::string &unanswered) {
  frame::check_fields(request_shape(op), fields, "TCPStore " + what);
  const auto request = frame::encode(op, fields);
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0)
    connect_locked(timeout_);
  const auto deadline = Clock::now() + timeout;
  auto fail = [&](Kind kind, const std::string &why) {
    close_locked(); // a late reply must not be read as the next call's: that call connects again
    return DistributedError(kind, "TCPStore " + what + " on " + address() + ": " + why);
  };
  auto lost = [&](const std::string &why) {
    return fail(Kind::PeerLost,
                "the connection to the master was lost (" + why + "); rank 0 may have exited, see its output");
  };
  auto timed_out = [&] {
    return fail(Kind::Timeout, "no answer within " + std::to_string(timeout.count()) + " ms (" + unanswered + ")");
  };
  for (size_t sent = 0; sent < request.size();) {
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, ms_until(deadline)) == 0)
      throw timed_out();
    const ssize_t k = ::send(fd_, request.data() + sent, request.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (k < 0)
      throw lost(errno_text());
    sent += static_cast<size_t>(k);
  }
  std::vector<uint8_t> buf, chunk(kReadChunkBytes);
  for (;;) {
    frame::Header header;
    Fields out;
    size_t used = 0;
    std::string why;
    switch (frame::decode(buf.data(), buf.size(), reply_shape, &header, &out, &used, &why)) {
    case frame::Decoded::Malformed:
      throw fail(Kind::Protocol, "a malformed reply (" + why + ")");
    case frame::Decoded::Complete:
      if (header.op == kError)
        throw DistributedError(Kind::Invalid, text_of(out.at(0)));
      return out;
    case frame::Decoded::NeedMore:
      break;
    }
    pollfd p{fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, ms_until(deadline));
    if (r == 0)
      throw timed_out();
    const ssize_t k = r < 0 ? -1 : ::recv(fd_, chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (k <= 0)
      throw lost(k == 0 ? "closed by the master" : errno_text());
    buf.insert(buf.end(), chunk.begin(), chunk.begin() + k);
  }
}

void TCPStore::set(const std::string &key, const std::vector<uint8_t> &value) {
  call(kSet, {bytes_of(key), value}, "set('" + key + "')", timeout_, "the master is busy or stuck");
}

std::vector<uint8_t> TCPStore::get(const std::string &key) {
  return call(kGet, {bytes_of(key)}, "get('" + key + "')", timeout_, "no rank set key '" + key + "'").at(0);
}

int64_t TCPStore::add(const std::string &key, int64_t delta) {
  const auto out =
      call(kAdd, {bytes_of(key), int64_bytes(delta)}, "add('" + key + "')", timeout_, "the master is busy or stuck");
  return int64_of(out.at(0), "add('" + key + "')");
}

std::vector<uint8_t> TCPStore::compare_set(const std::string &key, const std::vector<uint8_t> &expected,
                                           const std::vector<uint8_t> &desired) {
  return call(kCompareSet, {bytes_of(key), expected, desired}, "compare_set('" + key + "')", timeout_,
              "the master is busy or stuck")
      .at(0);
}

void TCPStore::wait(const std::vector<std::string> &keys, std::chrono::milliseconds timeout) {
  if (keys.empty())
    return;
  Fields f;
  for (const auto &k : keys)
    f.push_back(bytes_of(k));
  const std::string names = quote_keys(keys);
  call(kWait, f, "wait([" + names + "])", timeout, "keys among [" + names + "] were not set");
}

bool TCPStore::check(const std::vector<std::string> &keys) {
  if (keys.empty())
    return true;
  Fields f;
  for (const auto &k : keys)
    f.push_back(bytes_of(k));
  return call(kCheck, f, "check([" + quote_keys(keys) + "])", timeout_, "the master is busy or stuck").at(0).at(0) == 1;
}

bool TCPStore::delete_key(const std::string &key) {
  return call(kDelete, {bytes_of(key)}, "delete_key('" + key + "')", timeout_, "the master is busy or stuck")
             .at(0)
             .at(0) == 1;
}

int64_t TCPStore::num_keys() {
  return int64_of(call(kNumKeys, {}, "num_keys()", timeout_, "the master is busy or stuck").at(0), "num_keys()");
}

} // namespace kiln::runtime::distributed
