// peer_main.h - the main() shared by the benchmarks that compare Kiln with
// LibTorch in the same process (kiln-bench-ops, kiln-bench-gpt).
//
// LibTorch's OpenBLAS misdetects this CPU unless OPENBLAS_CORETYPE is set
// before the process starts, so the process re-executes itself with
// OPENBLAS_CORETYPE=SkylakeX (Haswell on a host without AVX-512) when it is
// missing; LibTorch's intra-op pool is
// set to the same thread count as Kiln's GEMMs.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <benchmark/benchmark.h>

#ifdef KILN_HAVE_LIBTORCH
#include <torch/torch.h>
#endif

namespace kiln::bench {

/// Threads for LibTorch and for the GEMMs on both sides.
constexpr int kThreads = 2;

/// Runs the registered benchmarks with `context` added to the JSON context.
inline int run_peer_benchmarks(int argc, char **argv,
                               const std::vector<std::pair<std::string, std::string>> &context = {}) {
#ifdef KILN_HAVE_LIBTORCH
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    // SkylakeX kernels need AVX-512 (an AVX2-only host dies with SIGILL in them).
    setenv("OPENBLAS_CORETYPE", __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell", 1);
    execv("/proc/self/exe", argv);  // only returns on failure: continue without it
  }
  torch::set_num_threads(kThreads);
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("threads", std::to_string(kThreads));
  for (const auto &[key, value] : context) benchmark::AddCustomContext(key, value);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace kiln::bench
