// Bandwidth of compiled (fused) layer_norm and softmax forward vs a STREAM
// triad (a = b + s*c) measured in the same run. The compiled row kernels
// run split over the OpenMP threads (2 here, LaunchExecutable's
// split_rows); the triad runs on one thread (BM_Triad) and on the OpenMP
// threads (BM_TriadThreads, the baseline for the kernels). Wall time
// (UseRealTime). Bytes counted: the minimum traffic, one read of the input
// and one write of the output for the norms, two reads and one write for
// the triad. Compare bytes_per_second.
#include <benchmark/benchmark.h>

#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

constexpr int64_t kRows = 4096, kCols = 1024;

struct Softmax : nn::Module {
  Tensor forward(const Tensor &x) override { return nn::functional::softmax(x, 1); }
  std::string name() const override { return "Softmax"; }
};

void run_compiled(benchmark::State &state, std::shared_ptr<nn::Module> module) {
  NoGradGuard no_grad;
  auto compiled = compile(std::move(module));
  manual_seed(0);
  Tensor x = randn({kRows, kCols});
  compiled->forward(x);  // compile outside the timed loop
  for (auto _ : state) benchmark::DoNotOptimize(compiled->forward(x));
  state.SetBytesProcessed(state.iterations() * kRows * kCols * 4 * 2);
  state.counters["kernels"] = compiled->stats().num_fusions;
}

void BM_CompiledLayerNormForward(benchmark::State &state) {
  run_compiled(state, std::make_shared<nn::LayerNorm>(Shape{kCols}));
}

void BM_CompiledSoftmaxForward(benchmark::State &state) { run_compiled(state, std::make_shared<Softmax>()); }

/// a = b + s * c over 4M floats; on the OpenMP threads when `parallel`.
void run_triad(benchmark::State &state, bool parallel) {
  const int64_t n = kRows * kCols;
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  const float s = 3.0f;
  for (auto _ : state) {
    float *__restrict pa = a.data();
    const float *__restrict pb = b.data();
    const float *__restrict pc = c.data();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 3);
}

void BM_Triad(benchmark::State &state) { run_triad(state, false); }
void BM_TriadThreads(benchmark::State &state) { run_triad(state, true); }

}  // namespace

BENCHMARK(BM_Triad)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TriadThreads)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CompiledLayerNormForward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CompiledSoftmaxForward)->Unit(benchmark::kMillisecond)->UseRealTime();
