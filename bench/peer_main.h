// peer_main.h - the main() shared by the benchmarks that compare Kiln with
// LibTorch in the same process (kiln-bench-ops, kiln-bench-gpt).
//
// The process first re-executes itself with OPENBLAS_CORETYPE set
// (libtorch_env.h says why); LibTorch's intra-op pool is set to the same
// thread count as Kiln's GEMMs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#ifdef KILN_HAVE_LIBTORCH
#include <torch/torch.h>

#include "libtorch_env.h"
#endif

namespace kiln::bench {

/// Threads for LibTorch and for the GEMMs on both sides.
constexpr int kThreads = 2;

/// Runs the registered benchmarks with `context` added to the JSON context.
inline int run_peer_benchmarks(int argc, char **argv,
                               const std::vector<std::pair<std::string, std::string>> &context = {}) {
#ifdef KILN_HAVE_LIBTORCH
  reexec_with_openblas_coretype(argv);
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
