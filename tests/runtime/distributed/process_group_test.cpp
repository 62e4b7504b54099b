// The Gloo process group (runtime/src/distributed/GlooProcessGroup.cpp) with
// ranks as threads of this process meeting through a HashStore, over
// loopback TCP: every collective against its closed form in every dtype,
// call order and tags, the fingerprint check, and failures (a peer that
// leaves, a peer that never calls) as DistributedError within the timeout;
// choose_gloo_hostname's rules and errors (across nodes:
// two_nodes_test.sh).
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "../../../runtime/src/cpu/Half.h"
#include "kiln/runtime/distributed/ProcessGroup.h"
#include "thread_ranks.h"

namespace kiln::runtime::distributed {
namespace {

using namespace std::chrono_literals;

TensorView make_view(DType t, int64_t n) {
  return TensorView{Buffer::make(static_cast<size_t>(n) * itemsize(t)), 0, {n}, {1}, t};
}

using test::run_thread_ranks;

TEST(GlooProcessGroup, AllreduceSumAvgMaxMinInFloat32Float64Int64Int32) {
  for (int size : {2, 3}) {
    run_thread_ranks(size, [size](ProcessGroup &pg) {
      const int64_t n = 3001; // odd: the ring splits it unevenly
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
        auto f32 = make_view(DType::Float32, n);
        auto f64 = make_view(DType::Float64, n);
        auto i64 = make_view(DType::Int64, n);
        auto i32 = make_view(DType::Int32, n);
        for (int64_t i = 0; i < n; ++i) {
          const int v = static_cast<int>((i % 7) * (pg.rank() + 1)) - 5; // rank-dependent, exact in every dtype
          static_cast<float *>(f32.data())[i] = static_cast<float>(v);
          static_cast<double *>(f64.data())[i] = v;
          static_cast<int64_t *>(i64.data())[i] = v;
          static_cast<int32_t *>(i32.data())[i] = v;
        }
        std::vector<std::shared_ptr<Work>> works;
        for (auto *t : {&f32, &f64, &i64, &i32}) works.push_back(pg.allreduce(*t, op));
        for (auto &w : works) w->wait();
        for (int64_t i = 0; i < n; ++i) {
          int64_t sum = 0, mx = INT64_MIN, mn = INT64_MAX;
          for (int r = 0; r < size; ++r) {
            const int64_t v = (i % 7) * (r + 1) - 5;
            sum += v, mx = std::max(mx, v), mn = std::min(mn, v);
          }
          const double expected = op == ReduceOp::Sum   ? double(sum)
                                  : op == ReduceOp::Avg ? double(sum) / size
                                  : op == ReduceOp::Max ? double(mx)
                                                        : double(mn);
          const int64_t expected_int = op == ReduceOp::Avg ? sum / size : static_cast<int64_t>(expected);
          ASSERT_FLOAT_EQ(static_cast<float *>(f32.data())[i], static_cast<float>(expected)) << i;
          ASSERT_DOUBLE_EQ(static_cast<double *>(f64.data())[i], expected) << i;
          ASSERT_EQ(static_cast<int64_t *>(i64.data())[i], expected_int) << i;
          ASSERT_EQ(static_cast<int32_t *>(i32.data())[i], expected_int) << i;
        }
      }
    });
  }
}

TEST(GlooProcessGroup, SixteenBitFloatsReduceInFloatAndRoundToNearestEven) {
  run_thread_ranks(2, [](ProcessGroup &pg) {
    auto h = make_view(DType::Float16, 4), b = make_view(DType::BFloat16, 4);
    const float values[2][4] = {{1.0f, 0.5f, -3.0f, 1000.0f}, {2.0f, 0.25f, 1.0f, 0.125f}};
    for (int i = 0; i < 4; ++i) {
      static_cast<uint16_t *>(h.data())[i] = cpu::float_to_half(values[pg.rank()][i]);
      static_cast<uint16_t *>(b.data())[i] = cpu::float_to_bf16(values[pg.rank()][i]);
    }
    pg.allreduce(h, ReduceOp::Sum)->wait();
    pg.allreduce(b, ReduceOp::Sum)->wait();
    for (int i = 0; i < 4; ++i) {
      const float exact = values[0][i] + values[1][i];
      EXPECT_EQ(static_cast<uint16_t *>(h.data())[i], cpu::float_to_half(exact)) << i;
      EXPECT_EQ(static_cast<uint16_t *>(b.data())[i], cpu::float_to_bf16(exact)) << i;
    }
  });
}

TEST(GlooProcessGroup, BroadcastAllgatherReduceScatterBarrier) {
  run_thread_ranks(3, [](ProcessGroup &pg) {
    const int size = pg.size(), rank = pg.rank();
    auto t = make_view(DType::Float32, 5);
    for (int i = 0; i < 5; ++i) static_cast<float *>(t.data())[i] = static_cast<float>(rank * 10 + i);
    pg.broadcast(t, 1)->wait();
    for (int i = 0; i < 5; ++i) ASSERT_EQ(static_cast<float *>(t.data())[i], 10.0f + i);

    auto in = make_view(DType::Int64, 2);
    static_cast<int64_t *>(in.data())[0] = rank, static_cast<int64_t *>(in.data())[1] = rank * rank;
    std::vector<TensorView> outs;
    for (int r = 0; r < size; ++r) outs.push_back(make_view(DType::Int64, 2));
    pg.allgather(outs, in)->wait();
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(static_cast<int64_t *>(outs[r].data())[0], r);
      ASSERT_EQ(static_cast<int64_t *>(outs[r].data())[1], r * r);
    }

    std::vector<TensorView> parts;
    for (int r = 0; r < size; ++r) {
      parts.push_back(make_view(DType::Float64, 3));
      for (int i = 0; i < 3; ++i) static_cast<double *>(parts[r].data())[i] = 100.0 * r + i + rank;
    }
    auto out = make_view(DType::Float64, 3);
    pg.reduce_scatter(out, parts, ReduceOp::Sum)->wait();
    for (int i = 0; i < 3; ++i) // sum over ranks q of 100*rank + i + q
      ASSERT_DOUBLE_EQ(static_cast<double *>(out.data())[i], size * (100.0 * rank + i) + (0 + 1 + 2));
    pg.barrier()->wait();
  });
}

TEST(GlooProcessGroup, CollectivesRunInCallOrderOnTheCommunicationThread) {
  run_thread_ranks(2, [](ProcessGroup &pg) {
    std::vector<TensorView> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 20; ++k) {
      ts.push_back(make_view(DType::Float32, 1000 + k));
      for (int64_t i = 0; i < 1000 + k; ++i) static_cast<float *>(ts.back().data())[i] = float(k + pg.rank());
      works.push_back(pg.allreduce(ts.back(), ReduceOp::Sum));
    }
    works.back()->wait();
    for (int k = 0; k < 20; ++k) {
      EXPECT_TRUE(works[k]->is_completed()) << k; // in order: the last done means all done
      EXPECT_EQ(static_cast<float *>(ts[k].data())[999], float(2 * k + 1));
      if (k) EXPECT_LE(works[k - 1]->end_time(), works[k]->start_time());
    }
  });
}

TEST(GlooProcessGroup, BadArgumentsThrowAtTheCall) {
  run_thread_ranks(2, [](ProcessGroup &pg) {
    TensorView strided = make_view(DType::Float32, 8);
    strided.sizes = {4}, strided.strides = {2};
    try {
      pg.allreduce(strided, ReduceOp::Sum);
      ADD_FAILURE() << "a strided tensor was reduced";
    } catch (const DistributedError &e) {
      EXPECT_NE(std::string(e.what()).find("contiguous"), std::string::npos) << e.what();
    }
    EXPECT_THROW(pg.broadcast(make_view(DType::Float32, 1), 2), DistributedError);
    EXPECT_THROW(pg.allgather({make_view(DType::Float32, 1)}, make_view(DType::Float32, 1)), DistributedError);
    EXPECT_THROW(pg.allreduce(make_view(DType::Bool, 1), ReduceOp::Avg), DistributedError);
    pg.barrier()->wait(); // the group still works
  });
}

TEST(GlooProcessGroup, FingerprintsReportADesyncInsteadOfHanging) {
  GlooOptions options;
  options.check_fingerprints = true;
  options.timeout = 5000ms;
  auto store = std::make_shared<HashStore>();
  std::string errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto pg = make_gloo_process_group(store, r, 2, options);
      auto t = make_view(DType::Float32, r == 0 ? 4 : 5); // rank 1 reduces a different size
      try {
        pg->allreduce(t, ReduceOp::Sum)->wait();
      } catch (const DistributedError &e) {
        EXPECT_EQ(e.kind(), DistributedError::Kind::Mismatch);
        errors[r] = e.what();
      }
    });
  for (auto &t : threads) t.join();
  for (const auto &e : errors) {
    EXPECT_NE(e.find("rank 0 runs allreduce #0 (float32, 4 elements) but rank 1 runs allreduce #0 (float32, 5 elements)"),
              std::string::npos)
        << e;
  }
}

TEST(GlooProcessGroup, APeerThatLeavesOrNeverCallsFailsTheOthersWithinTheTimeout) {
  for (bool leaves : {true, false}) {
    GlooOptions options;
    options.timeout = 1000ms;
    auto store = std::make_shared<HashStore>();
    std::string error;
    DistributedError::Kind kind{};
    double seconds = 0;
    std::thread peer([&] {
      auto pg = make_gloo_process_group(store, 1, 2, options);
      if (!leaves) std::this_thread::sleep_for(3000ms); // alive, but never calls the collective
    }); // leaves: the group (its sockets) is destroyed at once
    {
      auto pg = make_gloo_process_group(store, 0, 2, options);
      auto t = make_view(DType::Float32, 1 << 16);
      const auto start = std::chrono::steady_clock::now();
      try {
        pg->allreduce(t, ReduceOp::Sum)->wait();
      } catch (const DistributedError &e) {
        error = e.what();
        kind = e.kind();
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      // The group is broken now: a later collective fails at once with the cause.
      try {
        pg->barrier()->wait();
        ADD_FAILURE() << "a broken group ran a barrier";
      } catch (const DistributedError &e) {
        EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
      }
    }
    peer.join();
    EXPECT_FALSE(error.empty()) << (leaves ? "leaves" : "never calls");
    EXPECT_LT(seconds, 1.0 + 5.0) << error;
    EXPECT_NE(error.find("allreduce #0 (float32, 65536 elements) on rank 0 of 2"), std::string::npos) << error;
    if (!leaves) EXPECT_EQ(kind, DistributedError::Kind::Timeout) << error;
  }
}

// ---- choose_gloo_hostname ------------------------------------------------------

TEST(ChooseGlooHostname, TheStoreConnectionsAddressUnlessAVariableSaysOtherwise) {
  EXPECT_EQ(choose_gloo_hostname("10.1.2.3", "", ""), "10.1.2.3");
  EXPECT_EQ(choose_gloo_hostname("", "", ""), "127.0.0.1"); // no TCPStore: one node
  EXPECT_EQ(choose_gloo_hostname("10.1.2.3", "lo", ""), "127.0.0.1");
  EXPECT_EQ(choose_gloo_hostname("10.1.2.3", "", "127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(choose_gloo_hostname("10.1.2.3", "", "localhost"), "127.0.0.1");
}

TEST(ChooseGlooHostname, BadValuesAreInvalidNamingTheVariableAndTheFix) {
  auto expect_invalid = [](const std::string &ifname, const std::string &hostname,
                           const std::vector<std::string> &words) {
    try {
      choose_gloo_hostname("10.1.2.3", ifname, hostname);
      ADD_FAILURE() << "no error for GLOO_SOCKET_IFNAME='" << ifname << "' KILN_GLOO_HOSTNAME='" << hostname << "'";
    } catch (const DistributedError &e) {
      EXPECT_EQ(e.kind(), DistributedError::Kind::Invalid) << e.what();
      for (const auto &w : words)
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " in: " << e.what();
    }
  };
  expect_invalid("kiln-no-if0", "", {"GLOO_SOCKET_IFNAME='kiln-no-if0'", "lo 127.0.0.1", "unset it"});
  expect_invalid("lo,eth0", "", {"GLOO_SOCKET_IFNAME='lo,eth0'", "name one"});
  expect_invalid("", "203.0.113.9",
                 {"KILN_GLOO_HOSTNAME='203.0.113.9'", "not an address of this node", "lo 127.0.0.1"});
  expect_invalid("lo", "127.0.0.1", {"GLOO_SOCKET_IFNAME='lo'", "KILN_GLOO_HOSTNAME='127.0.0.1'", "only one"});
}

} // namespace
} // namespace kiln::runtime::distributed
