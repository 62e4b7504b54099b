// kiln-bench-allreduce: all-reduce bandwidth through Kiln's Gloo process
// group (runtime/distributed: the communication thread, Work, tags) against
// raw gloo::allreduce on a context of its own, in the same run, two ranks as
// threads over loopback TCP. Prints JSON: per size, seconds per call (median
// of the repetitions) and the bus bandwidth 2(n-1)/n * bytes / s (NCCL's
// busbw convention), and the ratio kiln / raw (goal >= 0.9).
//
//   kiln-bench-allreduce [--reps N] [--kiln-first] > bench/results/allreduce.json
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include "kiln/runtime/distributed/ProcessGroup.h"

using namespace kiln::runtime;
using namespace kiln::runtime::distributed;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kRanks = 2;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Seconds per all-reduce of `n` floats, median over `reps`, on both ranks
/// (rank 0's measurement is returned). `run(rank, data, n)` does one call.
template <class Setup> double time_ranks(size_t n, int reps, Setup setup) {
  std::vector<double> out(kRanks);
  std::vector<std::thread> ts;
  for (int r = 0; r < kRanks; ++r)
    ts.emplace_back([&, r] {
      auto call = setup(r);
      std::vector<float> data(n, 1.0f);
      for (int w = 0; w < 3; ++w) call(data.data(), n); // warm up
      std::vector<double> times;
      for (int i = 0; i < reps; ++i) {
        const auto t0 = Clock::now();
        call(data.data(), n);
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      out[static_cast<size_t>(r)] = median(times);
    });
  for (auto &t : ts) t.join();
  return out[0];
}

} // namespace

int main(int argc, char **argv) {
  int reps = 30;
  bool kiln_first = false; // --kiln-first: time Kiln before raw Gloo at each size (order effects)
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::max(3, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--kiln-first") == 0) kiln_first = true;
  }
  const std::vector<size_t> sizes{size_t{1} << 16, size_t{1} << 18, size_t{1} << 20, size_t{1} << 22}; // floats
  // Kiln: one group per rank for the whole run.
  auto kiln_store = std::make_shared<HashStore>();
  std::vector<std::unique_ptr<ProcessGroup>> groups(kRanks);
  {
    std::vector<std::thread> ts;
    for (int r = 0; r < kRanks; ++r) ts.emplace_back([&, r] { groups[r] = make_gloo_process_group(kiln_store, r, kRanks); });
    for (auto &t : ts) t.join();
  }
  // Raw Gloo: a context per rank on Gloo's own HashStore.
  gloo::rendezvous::HashStore raw_store;
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(kRanks);
  {
    std::vector<std::thread> ts;
    for (int r = 0; r < kRanks; ++r)
      ts.emplace_back([&, r] {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        attr.ai_family = AF_INET;
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        contexts[r] = std::make_shared<gloo::rendezvous::Context>(r, kRanks);
        contexts[r]->connectFullMesh(raw_store, dev);
      });
    for (auto &t : ts) t.join();
  }
  std::printf("{\n  \"benchmark\": \"allreduce\", \"ranks\": %d, \"transport\": \"gloo tcp loopback\", \"reps\": %d,\n"
              "  \"sizes\": [\n",
              kRanks, reps);
  for (size_t k = 0; k < sizes.size(); ++k) {
    const size_t n = sizes[k];
    const uint32_t raw_tag = 1000; // one call at a time per context: one tag serves
    double raw = 0, kiln_call = 0;
    auto time_raw = [&] {
    raw = time_ranks(n, reps, [&](int r) {
      return [&, r](float *p, size_t count) {
        gloo::AllreduceOptions o(contexts[r]);
        o.setOutput(p, count);
        o.setReduceFunction([](void *c, const void *a, const void *b, size_t m) {
          auto *x = static_cast<float *>(c);
          const auto *u = static_cast<const float *>(a), *v = static_cast<const float *>(b);
          for (size_t i = 0; i < m; ++i) x[i] = u[i] + v[i];
        });
        o.setTag(raw_tag);
        gloo::allreduce(o);
      };
    });
    };
    auto time_kiln = [&] {
    // Kiln on buffers it owns, as DDP's buckets are (no copies in the timed call).
    std::vector<std::shared_ptr<Buffer>> bufs(kRanks);
    for (auto &b : bufs) b = Buffer::make(n * sizeof(float));
    kiln_call = time_ranks(n, reps, [&](int r) {
      return [&, r](float *, size_t count) {
        TensorView v{bufs[r], 0, {static_cast<int64_t>(count)}, {1}, kiln::DType::Float32};
        groups[r]->allreduce(v, ReduceOp::Sum)->wait();
      };
    });
    };
    if (kiln_first) {
      time_kiln();
      time_raw();
    } else {
      time_raw();
      time_kiln();
    }
    const double bytes = static_cast<double>(n * sizeof(float)), bus = 2.0 * (kRanks - 1) / kRanks * bytes;
    std::printf("    {\"bytes\": %.0f, \"raw_gloo_s\": %.6g, \"kiln_s\": %.6g, \"raw_busbw_GBps\": %.3f, "
                "\"kiln_busbw_GBps\": %.3f, \"kiln_over_raw_bandwidth\": %.3f}%s\n",
                bytes, raw, kiln_call, bus / raw / 1e9, bus / kiln_call / 1e9, raw / kiln_call,
                k + 1 < sizes.size() ? "," : "");
  }
  std::printf("  ]\n}\n");
  return 0;
}
