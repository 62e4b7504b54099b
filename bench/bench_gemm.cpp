// bfloat16 vs float32 GEMM on the CPU, same process (kiln-bench-gemm):
// runtime::gemm16 (oneDNN matmul primitive on bfloat16, AMX-BF16 on this
// CPU; bfloat16 and float32 results) against runtime::sgemm (dnnl_sgemm),
// and eager kiln::matmul on bfloat16 vs float32 tensors (allocation and
// dispatch included). oneDNN's threads: OMP_NUM_THREADS (all cores by default).
//
//   OMP_NUM_THREADS=1 build/bench/kiln-bench-gemm --benchmark_out=bench/results/gemm.json \
//       --benchmark_out_format=json --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true \
//       --benchmark_report_aggregates_only=true --benchmark_min_time=0.2 --benchmark_context=omp_threads=1
//   python3 bench/ratios.py bench/results/gemm.json --pair F32 BF16     # time(f32) / time(bf16)
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "kiln/kiln.h"
#include "kiln/runtime/Gemm.h"

namespace {

using kiln::runtime::Matrix16View;
using kiln::runtime::MatrixView;

/// Deterministic values in [-1, 1).
std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto &x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>((seed >> 8) * (1.0 / 8388608.0) - 1.0);
  }
  return v;
}

void set_flops(benchmark::State &state, int64_t n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1000);
}

/// Operands and result live in Kiln tensors (64-byte aligned, like every
/// eager GEMM's); std::vector's 16-byte alignment makes both oneDNN GEMMs
/// up to 2x slower on this CPU.
void BM_GemmF32(benchmark::State &state) {
  const int64_t n = state.range(0);
  kiln::Tensor a = kiln::tensor(values(n * n, 1), {n, n}), b = kiln::tensor(values(n * n, 2), {n, n});
  kiln::Tensor c = kiln::Tensor::empty({n, n});
  const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
  for (auto _ : state) {
    kiln::runtime::sgemm(MatrixView{pa, n, n, n, 1}, MatrixView{pb, n, n, n, 1}, c.data_ptr<float>(), n);
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(state, n);
}

/// gemm16 on bfloat16 copies of the same values; `out` is the result dtype.
void gemm_bf16(benchmark::State &state, kiln::DType out) {
  const int64_t n = state.range(0);
  if (!kiln::runtime::gemm16_native(kiln::kBFloat16)) {
    state.SkipWithError("oneDNN has no bfloat16 matmul on this CPU");
    return;
  }
  kiln::Tensor a = kiln::tensor(values(n * n, 1), {n, n}).to(kiln::kBFloat16);
  kiln::Tensor b = kiln::tensor(values(n * n, 2), {n, n}).to(kiln::kBFloat16);
  kiln::Tensor c = kiln::Tensor::empty({n, n}, out);
  const auto *pa = static_cast<const uint16_t *>(a.raw_data()), *pb = static_cast<const uint16_t *>(b.raw_data());
  for (auto _ : state) {
    kiln::runtime::gemm16(kiln::kBFloat16, Matrix16View{pa, n, n, n, 1}, Matrix16View{pb, n, n, n, 1}, out,
                          c.raw_data(), n);
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(state, n);
}
void BM_GemmBF16(benchmark::State &state) { gemm_bf16(state, kiln::kBFloat16); }
void BM_GemmBF16F32Out(benchmark::State &state) { gemm_bf16(state, kiln::kFloat32); }

void matmul(benchmark::State &state, kiln::DType dtype) {
  const int64_t n = state.range(0);
  kiln::Tensor a = kiln::tensor(values(n * n, 1), {n, n}).to(dtype);
  kiln::Tensor b = kiln::tensor(values(n * n, 2), {n, n}).to(dtype);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::matmul(a, b));
  set_flops(state, n);
}
void BM_MatmulF32(benchmark::State &state) { matmul(state, kiln::kFloat32); }
void BM_MatmulBF16(benchmark::State &state) { matmul(state, kiln::kBFloat16); }

BENCHMARK(BM_GemmF32)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GemmBF16)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_GemmBF16F32Out)->Arg(512)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MatmulF32)->Arg(512)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_MatmulBF16)->Arg(512)->Arg(64)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
