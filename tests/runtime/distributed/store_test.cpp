// TCPStore and HashStore (runtime/src/distributed): every operation, blocking
// get across threads and processes, timeouts, a client before its master, a
// master that goes away, and hostile clients that must not harm the store.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "kiln/runtime/distributed/TCPStore.h"

namespace kiln::runtime::distributed {
namespace {

using namespace std::chrono_literals;

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

/// The operations against their c10d semantics, on any store.
void check_operations(Store &a, Store &b) {
  a.set("k", std::string("v1"));
  EXPECT_EQ(b.get_string("k"), "v1");
  EXPECT_EQ(b.add("n", 3), 3);
  EXPECT_EQ(a.add("n", -1), 2);
  EXPECT_EQ(a.get_string("n"), "2");
  const std::vector<uint8_t> none, x{'x'}, y{'y'};
  EXPECT_EQ(a.compare_set("c", x, y), x);    // absent, expected given: left absent
  EXPECT_FALSE(a.check({"c"}));
  EXPECT_EQ(a.compare_set("c", none, x), x); // absent, expected empty: set
  EXPECT_EQ(b.compare_set("c", y, y), x);    // mismatch: unchanged
  EXPECT_EQ(b.compare_set("c", x, y), y);    // match: swapped
  EXPECT_TRUE(b.check({"k", "n", "c"}));
  EXPECT_FALSE(b.check({"k", "absent"}));
  const int64_t keys = a.num_keys();
  EXPECT_TRUE(a.delete_key("c"));
  EXPECT_FALSE(a.delete_key("c"));
  EXPECT_EQ(b.num_keys(), keys - 1);
  std::vector<uint8_t> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  a.set("big", big);
  EXPECT_EQ(b.get("big"), big);
}

TEST(TCPStore, OperationsBetweenTwoClientsOfOneMaster) {
  auto m = master();
  auto c = client(m->port());
  check_operations(*m, *c);
}

TEST(HashStore, Operations) {
  HashStore s;
  check_operations(s, s);
}

TEST(TCPStore, GetBlocksUntilAnotherThreadSets) {
  auto m = master();
  auto c = client(m->port());
  std::thread setter([&] {
    std::this_thread::sleep_for(100ms);
    m->set("late", std::string("here"));
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c->get_string("late"), "here");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 90ms);
  setter.join();
  c->wait({"late"});
}

TEST(TCPStore, AddFromFourThreadsIsAtomic) {
  auto m = master();
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      auto c = client(m->port());
      for (int i = 0; i < 100; ++i) c->add("counter", 1);
    });
  for (auto &t : ts) t.join();
  EXPECT_EQ(m->add("counter", 0), 400);
}

TEST(TCPStore, GetAndWaitTimeOutNamingTheKeyAndTheStoreStaysUsable) {
  auto m = master(300ms);
  auto c = client(m->port(), 300ms);
  try {
    c->get("never");
    ADD_FAILURE() << "get returned";
  } catch (const DistributedError &e) {
    EXPECT_EQ(e.kind(), DistributedError::Kind::Timeout);
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c->wait({"a", "b"}, 100ms), DistributedError);
  m->set("never", std::string("now"));
  EXPECT_EQ(c->get_string("never"), "now"); // a late answer to the timed-out get is not read as this reply
}

TEST(TCPStore, AClientMayStartBeforeItsMasterAndWorkersAreCounted) {
  // Find a free port, then start the client first.
  uint16_t port;
  {
    auto probe = master();
    port = probe->port();
  }
  std::unique_ptr<TCPStore> c;
  std::thread late_client([&] {
    TCPStoreOptions o;
    o.port = port;
    o.num_workers = 2;
    o.timeout = 5000ms;
    c = std::make_unique<TCPStore>(o);
  });
  std::this_thread::sleep_for(200ms);
  TCPStoreOptions o;
  o.port = port;
  o.is_master = true;
  o.num_workers = 2;
  o.timeout = 5000ms;
  TCPStore m(o);
  late_client.join();
  c->set("x", std::string("1"));
  EXPECT_EQ(m.get_string("x"), "1");
}

TEST(TCPStore, AMasterThatGoesAwayIsPeerLostNotAHang) {
  auto m = master();
  auto c = client(m->port(), 5000ms);
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    m.reset();
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c->get("never");
    ADD_FAILURE() << "get returned";
  } catch (const DistributedError &e) {
    EXPECT_EQ(e.kind(), DistributedError::Kind::PeerLost) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3000ms);
  killer.join();
}

TEST(TCPStore, ForkedProcessesMeetThroughIt) {
  auto m = master(5000ms);
  const uint16_t port = m->port();
  std::vector<pid_t> kids;
  for (int r = 1; r <= 2; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        auto c = client(port, 5000ms);
        c->set("rank" + std::to_string(r), std::to_string(r * 10));
        c->add("arrived", 1);
        c->wait({"go"});
        ::_exit(c->get_string("rank" + std::to_string(3 - r)) == std::to_string((3 - r) * 10) ? 0 : 1);
      } catch (...) {
        ::_exit(2);
      }
    }
    kids.push_back(pid);
  }
  m->wait({"rank1", "rank2"});
  m->set("go", std::string("1"));
  for (pid_t k : kids) {
    int status = 0;
    ::waitpid(k, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  EXPECT_EQ(m->add("arrived", 0), 2);
}

int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  return fd;
}

long max_rss_kb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(TCPStore, HostileClientsAreDisconnectedWithoutHarm) {
  auto m = master();
  auto c = client(m->port());
  c->set("keep", std::string("safe"));
  const long rss0 = max_rss_kb();
  std::vector<std::vector<uint8_t>> attacks;
  attacks.push_back(std::vector<uint8_t>(64, 0xAB));                                  // garbage, bad magic
  {
    std::vector<uint8_t> a = {0x31, 0x53, 0x4c, 0x4b, 1, 1, 0, 0, 0};               // SET, one field...
    const uint64_t huge = uint64_t{1} << 60;                                         // ...claiming 2^60 bytes
    a.resize(a.size() + 8);
    std::memcpy(a.data() + 9, &huge, 8);
    attacks.push_back(a);
  }
  attacks.push_back({0x31, 0x53, 0x4c, 0x4b, 99, 0, 0, 0, 0});                        // unknown op
  attacks.push_back({0x31, 0x53, 0x4c, 0x4b, 1, 0xff, 0xff, 0xff, 0x7f});             // 2^31 fields
  attacks.push_back({0x31, 0x53, 0x4c, 0x4b, 1, 2, 0, 0, 0, 5, 0});                   // half a message, then close
  for (const auto &bytes : attacks) {
    const int fd = raw_connect(m->port());
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
    std::this_thread::sleep_for(20ms);
    ::close(fd);
  }
  EXPECT_LT(max_rss_kb() - rss0, 64 * 1024) << "the server allocated what a message claimed";
  EXPECT_EQ(c->get_string("keep"), "safe");
  auto fresh = client(m->port());
  fresh->set("after", std::string("ok"));
  EXPECT_EQ(c->get_string("after"), "ok");
}

} // namespace
} // namespace kiln::runtime::distributed
