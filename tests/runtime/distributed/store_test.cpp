// The stores (runtime/src/distributed): every operation on TCPStore,
// FileStore and HashStore against c10d's semantics; blocking get across
// threads and forked processes; timeouts that name their keys; a client
// before its master; a master that goes away; hostile TCP clients that must
// not harm the store; a FileStore whose file is truncated or corrupt.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "kiln/runtime/distributed/FileStore.h"
#include "kiln/runtime/distributed/TCPStore.h"

namespace kiln::runtime::distributed {
namespace {

using namespace std::chrono_literals;
using Kind = DistributedError::Kind;

std::unique_ptr<TCPStore> master(std::chrono::milliseconds timeout = 2000ms) {
  TCPStoreOptions o;
  o.is_master = true;
  o.timeout = timeout;
  return std::make_unique<TCPStore>(o);
}

std::unique_ptr<TCPStore> client(uint16_t port, std::chrono::milliseconds timeout = 2000ms) {
  TCPStoreOptions o;
  o.port = port;
  o.timeout = timeout;
  return std::make_unique<TCPStore>(o);
}

/// A fresh path under the test's temporary directory.
std::string temp_path(const std::string &name) {
  const std::string path = ::testing::TempDir() + "kiln-" + name + "-" + std::to_string(::getpid());
  ::unlink(path.c_str());
  return path;
}

/// Runs `body` and expects a DistributedError of `kind` whose message holds
/// every one of `words`.
void expect_error(Kind kind, const std::vector<std::string> &words, const std::function<void()> &body) {
  try {
    body();
    ADD_FAILURE() << "no DistributedError";
  } catch (const DistributedError &e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto &w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " in: " << e.what();
  }
}

/// Forks `n` children that each run `body(i)` and exit with its status
/// (2 on an exception); returns once every one has, expecting 0 from each.
void run_children(int n, const std::function<int(int)> &body) {
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int rc = 2;
      try {
        rc = body(i);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) {
    int status = 0;
    ::waitpid(k, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
}

/// The operations against their c10d semantics, `a` and `b` two handles on
/// one store.
void check_operations(Store &a, Store &b) {
  const int64_t keys0 = a.num_keys();
  a.set("k", std::string("v1"));
  EXPECT_EQ(b.get_string("k"), "v1");
  a.set("k", std::string("v2")); // overwrites
  EXPECT_EQ(b.get_string("k"), "v2");
  EXPECT_EQ(b.add("n", 3), 3);
  EXPECT_EQ(a.add("n", -1), 2);
  EXPECT_EQ(a.get_string("n"), "2"); // decimal text
  const std::vector<uint8_t> none, x{'x'}, y{'y'};
  EXPECT_EQ(a.compare_set("c", x, y), x); // absent, expected given: left absent
  EXPECT_FALSE(a.check({"c"}));
  EXPECT_EQ(a.compare_set("c", none, x), x); // absent, expected empty: set
  EXPECT_EQ(b.compare_set("c", y, y), x);    // mismatch: unchanged
  EXPECT_EQ(b.compare_set("c", x, y), y);    // match: swapped
  EXPECT_EQ(a.get("c"), y);
  EXPECT_TRUE(b.check({"k", "n", "c"}));
  EXPECT_FALSE(b.check({"k", "absent"}));
  EXPECT_EQ(a.num_keys(), keys0 + 3);
  EXPECT_TRUE(a.delete_key("c"));
  EXPECT_FALSE(a.delete_key("c"));
  EXPECT_FALSE(b.check({"c"}));
  EXPECT_EQ(b.num_keys(), keys0 + 2);
  a.set("empty", std::vector<uint8_t>{});
  EXPECT_TRUE(b.check({"empty"}));
  EXPECT_TRUE(b.get("empty").empty());
  std::vector<uint8_t> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = static_cast<uint8_t>(i * 7);
  a.set("big", big);
  EXPECT_EQ(b.get("big"), big);
  b.wait({"k", "n", "big"});
  expect_error(Kind::Invalid, {"'k'", "not an integer"}, [&] { a.add("k", 1); });
  expect_error(Kind::Invalid, {"key of 5000 bytes"}, [&] { a.set(std::string(5000, 'k'), std::string("v")); });
  EXPECT_EQ(b.get_string("k"), "v2"); // still usable after the errors
}

/// get() blocks until another thread sets the key.
void check_get_blocks(Store &setter_store, Store &getter_store) {
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    setter_store.set("late", std::string("here"));
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(getter_store.get_string("late"), "here");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 90ms);
  setter.join();
}

/// get() and wait() time out (Timeout, naming the keys) and the store works after.
void check_timeouts(Store &s, Store &other) {
  s.set_timeout(200ms);
  const auto t0 = std::chrono::steady_clock::now();
  expect_error(Kind::Timeout, {"get", "'never'"}, [&] { s.get("never"); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
  other.set("a", std::string("1"));
  expect_error(Kind::Timeout, {"wait", "'b'"}, [&] { s.wait({"a", "b"}, 100ms); });
  other.set("never", std::string("now"));
  EXPECT_EQ(s.get_string("never"), "now"); // a late answer to the timed-out get is not read as this reply
  s.wait({"a", "never"}, 100ms);
}

// ---- TCPStore -------------------------------------------------------------------

TEST(TCPStore, OperationsBetweenTheMasterAndAClient) {
  auto m = master();
  auto c = client(m->port());
  check_operations(*m, *c);
}

TEST(TCPStore, LocalAddressIsThisEndOfTheConnectionToTheMaster) {
  auto m = master();
  auto c = client(m->port());
  EXPECT_EQ(m->local_address(), "127.0.0.1"); // the master reaches itself over loopback
  EXPECT_EQ(c->local_address(), "127.0.0.1");
}

TEST(TCPStore, GetBlocksUntilAnotherThreadSets) {
  auto m = master();
  auto c = client(m->port());
  check_get_blocks(*m, *c);
}

TEST(TCPStore, GetAndWaitTimeOutNamingTheKeys) {
  auto m = master();
  auto c = client(m->port());
  check_timeouts(*c, *m);
}

TEST(TCPStore, AddFromFourThreadsIsAtomic) {
  auto m = master();
  auto shared = client(m->port()); // two threads share one connection, two have their own
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      std::unique_ptr<TCPStore> own = t < 2 ? nullptr : client(m->port());
      Store &s = own ? *own : *shared;
      for (int i = 0; i < 100; ++i)
        s.add("counter", 1);
    });
  for (auto &t : ts)
    t.join();
  EXPECT_EQ(m->add("counter", 0), 400);
}

TEST(TCPStore, PrefixStoresKeepApart) {
  std::shared_ptr<Store> m = master();
  PrefixStore a("pg0", m), b("pg1", m);
  a.set("k", std::string("a"));
  b.set("k", std::string("b"));
  EXPECT_EQ(a.get_string("k"), "a");
  EXPECT_EQ(b.get_string("k"), "b");
  EXPECT_EQ(m->get_string("pg0/k"), "a");
  EXPECT_FALSE(m->check({"k"}));
  EXPECT_EQ(a.add("n", 5), 5);
  EXPECT_FALSE(b.check({"n"}));
  EXPECT_TRUE(a.delete_key("k"));
  EXPECT_EQ(b.get_string("k"), "b");
  EXPECT_EQ(m->num_keys(), 2); // pg0/n, pg1/k: the worker count is not a user key
}

TEST(TCPStore, AClientMayStartBeforeItsMasterAndWorkersAreCounted) {
  uint16_t port;
  {
    auto probe = master(); // a free port, closed again before the client starts
    port = probe->port();
  }
  std::unique_ptr<TCPStore> c;
  std::thread early_client([&] { c = client(port, 5000ms); });
  std::this_thread::sleep_for(200ms);
  TCPStoreOptions o;
  o.port = port;
  o.is_master = true;
  o.num_workers = 2;
  o.timeout = 5000ms;
  TCPStore m(o); // returns once the early client has connected
  early_client.join();
  c->set("x", std::string("1"));
  EXPECT_EQ(m.get_string("x"), "1");
}

TEST(TCPStore, MissingWorkersAndAnAbsentMasterTimeOutNamingTheAddress) {
  TCPStoreOptions o;
  o.is_master = true;
  o.num_workers = 3;
  o.timeout = 200ms;
  expect_error(Kind::Timeout, {"1 of 3", "MASTER_ADDR"}, [&] { TCPStore s(o); });
  uint16_t port;
  {
    auto probe = master();
    port = probe->port();
  }
  expect_error(Kind::Timeout, {"127.0.0.1:" + std::to_string(port), "is rank 0 running"}, [&] { client(port, 200ms); });
}

TEST(TCPStore, AMasterThatGoesAwayIsPeerLostNotAHang) {
  auto m = master();
  const uint16_t port = m->port();
  auto c = client(port, 5000ms);
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    m.reset();
  });
  const auto t0 = std::chrono::steady_clock::now();
  expect_error(Kind::PeerLost, {"127.0.0.1:" + std::to_string(port)}, [&] { c->get("never"); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3000ms);
  killer.join();
}

TEST(TCPStore, ForkedProcessesMeetThroughIt) {
  auto m = master(5000ms);
  const uint16_t port = m->port();
  std::thread go([&] {
    m->wait({"rank0", "rank1", "rank2"});
    m->set("go", std::string("1"));
  });
  run_children(3, [&](int r) {
    auto c = client(port, 5000ms);
    c->set("rank" + std::to_string(r), std::to_string(r * 10));
    for (int i = 0; i < 100; ++i)
      c->add("arrived", 1);
    c->wait({"go"});
    const int next = (r + 1) % 3;
    return c->get_string("rank" + std::to_string(next)) == std::to_string(next * 10) ? 0 : 1;
  });
  go.join();
  EXPECT_EQ(m->add("arrived", 0), 300);
}

// ---- hostile clients ------------------------------------------------------------

int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  return fd;
}

/// A frame header as the wire format (StoreFrame.h) lays it out: magic
/// "KLST", version, op, 0, field count, body bytes; then `body`.
std::vector<uint8_t> raw_frame(uint8_t op, uint32_t fields, uint64_t body_bytes, std::vector<uint8_t> body = {},
                               uint32_t magic = 0x4b4c5354, uint16_t version = 1) {
  std::vector<uint8_t> out(20 + body.size());
  std::memcpy(out.data(), &magic, 4);
  std::memcpy(out.data() + 4, &version, 2);
  out[6] = op;
  std::memcpy(out.data() + 8, &fields, 4);
  std::memcpy(out.data() + 12, &body_bytes, 8);
  std::copy(body.begin(), body.end(), out.begin() + 20);
  return out;
}

long max_rss_kb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(TCPStore, HostileClientsLoseOnlyTheirConnection) {
  auto m = master();
  auto c = client(m->port());
  c->set("keep", std::string("safe"));
  auto parked = client(m->port());
  std::string parked_value;
  std::thread parked_get([&] { parked_value = parked->get_string("after"); }); // waits through the attacks
  const long rss0 = max_rss_kb();
  const uint32_t huge_field = 0xfffffff0;
  std::vector<uint8_t> over_bound_field(kMaxKeyBytes + 8); // a whole body whose key field claims 4 GiB
  std::memcpy(over_bound_field.data(), &huge_field, 4);
  const std::vector<std::vector<uint8_t>> attacks = {
      std::vector<uint8_t>(64, 0xAB),                      // garbage
      raw_frame(1, 2, 16, {}, 0xdeadbeef),                 // bad magic
      raw_frame(1, 2, 16, {}, 0x4b4c5354, 7),              // unknown version
      raw_frame(1, 2, uint64_t{1} << 60),                  // set claiming 2^60 bytes
      raw_frame(99, 0, 0),                                 // unknown op
      raw_frame(5, 0x7fffffff, 64),                        // wait on 2^31 keys
      raw_frame(1, 2, kMaxKeyBytes + 8, over_bound_field), // a key field claiming 4 GiB
      raw_frame(1, 2, 200, std::vector<uint8_t>(10, 1)),   // half a message, then close
  };
  for (const auto &bytes : attacks) {
    const int fd = raw_connect(m->port());
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
    std::this_thread::sleep_for(20ms);
    ::close(fd);
  }
  {
    // Requests it never reads the replies to: the server stops reading it, nothing else.
    c->set("big", std::vector<uint8_t>(4 << 20, 7));
    const int fd = raw_connect(m->port());
    std::vector<uint8_t> get_big = raw_frame(2, 1, 4 + 3, {3, 0, 0, 0, 'b', 'i', 'g'}), many;
    for (int i = 0; i < 64; ++i)
      many.insert(many.end(), get_big.begin(), get_big.end());
    ASSERT_EQ(::send(fd, many.data(), many.size(), MSG_NOSIGNAL), static_cast<ssize_t>(many.size()));
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(c->get_string("keep"), "safe");
    ::close(fd);
  }
  EXPECT_LT(max_rss_kb() - rss0, 64 * 1024) << "the server allocated what a message claimed";
  EXPECT_EQ(c->get_string("keep"), "safe");
  auto fresh = client(m->port());
  fresh->set("after", std::string("ok"));
  parked_get.join();
  EXPECT_EQ(parked_value, "ok");
}

TEST(TCPStore, ARequestArrivingByteByByteIsServed) {
  auto m = master();
  const int fd = raw_connect(m->port());
  // set("k", "v"): fields of 1 and 1 bytes, each after its u32 length.
  const auto request = raw_frame(1, 2, 4 + 1 + 4 + 1, {1, 0, 0, 0, 'k', 1, 0, 0, 0, 'v'});
  for (uint8_t byte : request) {
    ASSERT_EQ(::send(fd, &byte, 1, MSG_NOSIGNAL), 1);
    std::this_thread::sleep_for(1ms);
  }
  uint8_t reply[20];
  size_t got = 0;
  while (got < sizeof reply) {
    const ssize_t k = ::recv(fd, reply + got, sizeof reply - got, 0);
    if (k <= 0)
      break;
    got += static_cast<size_t>(k);
  }
  EXPECT_EQ(got, sizeof reply); // the header of an empty kOk reply
  EXPECT_EQ(reply[6], 0);
  ::close(fd);
  EXPECT_EQ(m->get_string("k"), "v");
}

// ---- FileStore ------------------------------------------------------------------

TEST(FileStore, OperationsBetweenTwoStoresOnOneFile) {
  const std::string path = temp_path("ops");
  FileStore a(path), b(path);
  check_operations(a, b);
  ::unlink(path.c_str());
}

TEST(FileStore, GetBlocksAndTimesOutNamingTheKeys) {
  const std::string path = temp_path("timeouts");
  FileStore a(path), b(path);
  check_get_blocks(a, b);
  check_timeouts(a, b);
  ::unlink(path.c_str());
}

TEST(FileStore, ForkedProcessesShareItAndTheLastOneRemovesTheFile) {
  const std::string path = temp_path("fork");
  {
    FileStore parent(path, 5); // the parent and 4 children
    run_children(4, [&](int r) {
      FileStore s(path, 5);
      s.set_timeout(5000ms);
      s.set("rank" + std::to_string(r), std::to_string(r));
      for (int i = 0; i < 100; ++i)
        s.add("counter", 1);
      const std::vector<uint8_t> none, mine = {uint8_t('0' + r)};
      s.compare_set("leader", none, mine); // exactly one child wins
      s.wait({"rank0", "rank1", "rank2", "rank3"});
      return s.get_string("rank" + std::to_string((r + 1) % 4)) == std::to_string((r + 1) % 4) ? 0 : 1;
    });
    EXPECT_EQ(parent.add("counter", 0), 400);
    const std::string leader = parent.get_string("leader");
    ASSERT_EQ(leader.size(), 1u);
    EXPECT_TRUE(leader[0] >= '0' && leader[0] <= '3') << leader;
    EXPECT_EQ(parent.num_keys(), 6); // rank0..3, counter, leader; not the finished count
    EXPECT_EQ(::access(path.c_str(), F_OK), 0);
  }
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "the fifth FileStore to go did not remove " << path;
}

TEST(FileStore, ATruncatedOrCorruptFileIsAProtocolErrorNamingPathAndOffset) {
  const std::string path = temp_path("corrupt");
  {
    FileStore s(path);
    s.set("a", std::string("1"));
    s.set("b", std::string("22"));
  }
  std::ifstream in(path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t first = good.size() / 2; // two records of equal length
  auto write_file = [&](const std::string &bytes) { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; };

  write_file(good.substr(0, good.size() - 3)); // the second record cut short
  expect_error(Kind::Protocol, {path, "truncated", "offset " + std::to_string(first)}, [&] {
    FileStore s(path);
    s.get("a");
  });
  std::string bad_magic = good;
  bad_magic[first] ^= 0x55;
  write_file(bad_magic);
  expect_error(Kind::Protocol, {path, "magic", "offset " + std::to_string(first)}, [&] { FileStore(path).num_keys(); });
  std::string huge = good;
  const uint64_t claim = uint64_t{1} << 60;
  std::memcpy(huge.data() + 12, &claim, 8); // the first record claims 2^60 bytes
  write_file(huge);
  expect_error(Kind::Protocol, {path, "offset 0"}, [&] { FileStore(path).check({"a"}); });

  write_file(good);
  FileStore s(path);
  EXPECT_EQ(s.get_string("b"), "22");
  write_file(good.substr(0, first)); // shrank under a store that had read it all
  expect_error(Kind::Protocol, {path, "shrank"}, [&] { s.num_keys(); });
  ::unlink(path.c_str());
}

TEST(FileStore, ADirectoryThatDoesNotExistIsInvalidNamingThePath) {
  expect_error(Kind::Invalid, {"/nonexistent-kiln-dir/store"}, [] { FileStore s("/nonexistent-kiln-dir/store"); });
}

// ---- HashStore ------------------------------------------------------------------

TEST(HashStore, Operations) {
  HashStore s;
  check_operations(s, s);
  check_get_blocks(s, s);
  check_timeouts(s, s);
}

} // namespace
} // namespace kiln::runtime::distributed
