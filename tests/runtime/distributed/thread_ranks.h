// tests/runtime/distributed/thread_ranks.h - ranks as threads of one test
// process, meeting through a HashStore over loopback Gloo, for the process
// group tests (process_group_test.cpp, gloo_cuda_staging_test.cpp).
//
//   run_thread_ranks(3, [](ProcessGroup &pg) { pg.allreduce(...)->wait(); });
//
// Header only (GoogleTest and the runtime's distributed library).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/runtime/distributed/ProcessGroup.h"

namespace kiln::runtime::distributed::test {

/// Runs `body(group)` on `size` threads, one Gloo rank each (`options`; the
/// store waits `store_timeout` for a key). A rank's exception becomes a
/// test failure naming the rank and the message, after every thread joined
/// (a failing rank never leaves a thread running).
inline void run_thread_ranks(int size, const std::function<void(ProcessGroup &)> &body, GlooOptions options = {},
                             std::chrono::milliseconds store_timeout = std::chrono::seconds(10)) {
  auto store = std::make_shared<HashStore>();
  store->set_timeout(store_timeout);
  std::vector<std::thread> threads;
  std::vector<std::string> failures(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        auto pg = make_gloo_process_group(store, r, size, options);
        body(*pg);
      } catch (const std::exception &e) {
        failures[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto &t : threads) t.join();
  for (int r = 0; r < size; ++r) EXPECT_EQ(failures[static_cast<size_t>(r)], "") << "rank " << r;
}

} // namespace kiln::runtime::distributed::test
