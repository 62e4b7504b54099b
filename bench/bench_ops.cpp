// Per-op eager overhead on small tensors and throughput on large ones:
// Kiln vs LibTorch 1.13 in the same process (when built with LibTorch).
//
//   build/bench/kiln-bench-ops --benchmark_out=bench/results/ops.json --benchmark_out_format=json
//   python3 bench/ratios.py bench/results/ops.json --pair Torch Kiln
//
// Same thread count for both: 2 (LibTorch's intra-op pool and oneDNN's GEMM
// threads). LibTorch's OpenBLAS misdetects this CPU unless OPENBLAS_CORETYPE
// is set before the process starts, so main() re-executes itself with
// OPENBLAS_CORETYPE=SkylakeX when it is missing.
#include <cstdlib>

#include <benchmark/benchmark.h>

#include "kiln/kiln.h"
#include "peer_main.h"

#ifdef KILN_HAVE_LIBTORCH
#include <torch/torch.h>
#endif

namespace {


// ---- Kiln ----------------------------------------------------------------------

template <class F> void kiln_unary(benchmark::State &state, F f) {
  const int64_t n = state.range(0);
  kiln::manual_seed(0);
  kiln::Tensor x = kiln::rand({n}) + 0.5;
  for (auto _ : state) benchmark::DoNotOptimize(f(x));
  state.SetBytesProcessed(state.iterations() * n * 4 * 2);  // read + write
}

template <class F> void kiln_binary(benchmark::State &state, F f) {
  const int64_t n = state.range(0);
  kiln::manual_seed(0);
  kiln::Tensor x = kiln::rand({n}), y = kiln::rand({n});
  for (auto _ : state) benchmark::DoNotOptimize(f(x, y));
  state.SetBytesProcessed(state.iterations() * n * 4 * 3);
}

void BM_KilnAdd(benchmark::State &s) { kiln_binary(s, [](auto &a, auto &b) { return a + b; }); }
void BM_KilnMul(benchmark::State &s) { kiln_binary(s, [](auto &a, auto &b) { return a * b; }); }
void BM_KilnExp(benchmark::State &s) { kiln_unary(s, [](auto &a) { return kiln::exp(a); }); }
void BM_KilnRelu(benchmark::State &s) { kiln_unary(s, [](auto &a) { return kiln::relu(a); }); }
void BM_KilnSum(benchmark::State &s) { kiln_unary(s, [](auto &a) { return a.sum(); }); }

void BM_KilnMatmul(benchmark::State &state) {
  const int64_t n = state.range(0);
  kiln::Tensor a = kiln::rand({n, n}), b = kiln::rand({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::matmul(a, b));
  state.counters["FLOPS"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_KilnSoftmax(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  kiln::Tensor x = kiln::rand({rows, cols});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::nn::functional::softmax(x, 1));
  state.SetBytesProcessed(state.iterations() * rows * cols * 4 * 2);
}

void BM_KilnLogSoftmax(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  kiln::Tensor x = kiln::rand({rows, cols});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::nn::functional::log_softmax(x, 1));
  state.SetBytesProcessed(state.iterations() * rows * cols * 4 * 2);
}

/// softmax forward + backward (the attention pattern: a gradient flows back).
void BM_KilnSoftmaxTrain(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  kiln::Tensor x = kiln::rand({rows, cols}).requires_grad_(), g = kiln::rand({rows, cols});
  for (auto _ : state) {
    kiln::nn::functional::softmax(x, 1).backward(g);
    x.set_grad(kiln::Tensor());
  }
}

void BM_KilnLayerNorm(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  kiln::Tensor x = kiln::rand({rows, cols}), w = kiln::rand({cols}), b = kiln::rand({cols});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::nn::functional::layer_norm(x, {cols}, w, b, 1e-5));
}

/// layer_norm forward + backward with affine parameters.
void BM_KilnLayerNormTrain(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  kiln::Tensor x = kiln::rand({rows, cols}).requires_grad_(), g = kiln::rand({rows, cols});
  kiln::Tensor w = kiln::rand({cols}).requires_grad_(), b = kiln::rand({cols}).requires_grad_();
  for (auto _ : state) {
    kiln::nn::functional::layer_norm(x, {cols}, w, b, 1e-5).backward(g);
    for (const kiln::Tensor *t : {&x, &w, &b}) t->set_grad(kiln::Tensor());
  }
}

void BM_KilnGeluTanh(benchmark::State &s) { kiln_unary(s, [](auto &a) { return kiln::gelu(a, "tanh"); }); }

/// where(mask, x, y) with a bool mask, as relu's backward and attention masks.
void BM_KilnWhere(benchmark::State &s) {
  kiln_binary(s, [](auto &a, auto &b) { return kiln::where(kiln::gt(a, b), a, b); });
}

void BM_KilnAddBackward(benchmark::State &state) {
  const int64_t n = state.range(0);
  kiln::Tensor x = kiln::rand({n}).requires_grad_(), y = kiln::rand({n}).requires_grad_();
  for (auto _ : state) {
    (x * y).sum().backward();
  }
}

#ifdef KILN_HAVE_LIBTORCH
// ---- LibTorch -------------------------------------------------------------------

template <class F> void torch_unary(benchmark::State &state, F f) {
  const int64_t n = state.range(0);
  torch::manual_seed(0);
  torch::Tensor x = torch::rand({n}) + 0.5;
  for (auto _ : state) benchmark::DoNotOptimize(f(x));
  state.SetBytesProcessed(state.iterations() * n * 4 * 2);
}

template <class F> void torch_binary(benchmark::State &state, F f) {
  const int64_t n = state.range(0);
  torch::Tensor x = torch::rand({n}), y = torch::rand({n});
  for (auto _ : state) benchmark::DoNotOptimize(f(x, y));
  state.SetBytesProcessed(state.iterations() * n * 4 * 3);
}

void BM_TorchAdd(benchmark::State &s) { torch_binary(s, [](auto &a, auto &b) { return a + b; }); }
void BM_TorchMul(benchmark::State &s) { torch_binary(s, [](auto &a, auto &b) { return a * b; }); }
void BM_TorchExp(benchmark::State &s) { torch_unary(s, [](auto &a) { return torch::exp(a); }); }
void BM_TorchRelu(benchmark::State &s) { torch_unary(s, [](auto &a) { return torch::relu(a); }); }
void BM_TorchSum(benchmark::State &s) { torch_unary(s, [](auto &a) { return a.sum(); }); }

void BM_TorchMatmul(benchmark::State &state) {
  const int64_t n = state.range(0);
  torch::Tensor a = torch::rand({n, n}), b = torch::rand({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(torch::matmul(a, b));
  state.counters["FLOPS"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_TorchSoftmax(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  torch::Tensor x = torch::rand({rows, cols});
  for (auto _ : state) benchmark::DoNotOptimize(torch::softmax(x, 1));
  state.SetBytesProcessed(state.iterations() * rows * cols * 4 * 2);
}

void BM_TorchLogSoftmax(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  torch::Tensor x = torch::rand({rows, cols});
  for (auto _ : state) benchmark::DoNotOptimize(torch::log_softmax(x, 1));
  state.SetBytesProcessed(state.iterations() * rows * cols * 4 * 2);
}

void BM_TorchSoftmaxTrain(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  torch::Tensor x = torch::rand({rows, cols}).requires_grad_(), g = torch::rand({rows, cols});
  for (auto _ : state) {
    torch::softmax(x, 1).backward(g);
    x.mutable_grad() = torch::Tensor();
  }
}

void BM_TorchLayerNorm(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  torch::Tensor x = torch::rand({rows, cols}), w = torch::rand({cols}), b = torch::rand({cols});
  for (auto _ : state) benchmark::DoNotOptimize(torch::layer_norm(x, {cols}, w, b, 1e-5));
}

void BM_TorchLayerNormTrain(benchmark::State &state) {
  const int64_t rows = state.range(0), cols = 1024;
  torch::Tensor x = torch::rand({rows, cols}).requires_grad_(), g = torch::rand({rows, cols});
  torch::Tensor w = torch::rand({cols}).requires_grad_(), b = torch::rand({cols}).requires_grad_();
  for (auto _ : state) {
    torch::layer_norm(x, {cols}, w, b, 1e-5).backward(g);
    x.mutable_grad() = torch::Tensor();
    w.mutable_grad() = torch::Tensor();
    b.mutable_grad() = torch::Tensor();
  }
}

void BM_TorchGeluTanh(benchmark::State &s) { torch_unary(s, [](auto &a) { return torch::gelu(a, "tanh"); }); }

void BM_TorchWhere(benchmark::State &s) {
  torch_binary(s, [](auto &a, auto &b) { return torch::where(torch::gt(a, b), a, b); });
}

void BM_TorchAddBackward(benchmark::State &state) {
  const int64_t n = state.range(0);
  torch::Tensor x = torch::rand({n}).requires_grad_(), y = torch::rand({n}).requires_grad_();
  for (auto _ : state) {
    (x * y).sum().backward();
  }
}
#endif

}  // namespace

#define KILN_PAIR(name, ...)                                                                                           \
  BENCHMARK(BM_Kiln##name)->__VA_ARGS__;                                                                               \
  KILN_TORCH(BENCHMARK(BM_Torch##name)->__VA_ARGS__;)

#ifdef KILN_HAVE_LIBTORCH
#define KILN_TORCH(x) x
#else
#define KILN_TORCH(x)
#endif

// Small tensors (8 elements) measure per-op overhead; large ones throughput.
KILN_PAIR(Add, Arg(8)->Arg(16)->Arg(1 << 22))
KILN_PAIR(Mul, Arg(8)->Arg(1 << 22))
KILN_PAIR(Exp, Arg(8)->Arg(1 << 22))
KILN_PAIR(Relu, Arg(8)->Arg(1 << 22))
KILN_PAIR(Sum, Arg(8)->Arg(1 << 22))
KILN_PAIR(AddBackward, Arg(8))
KILN_PAIR(Matmul, Arg(8)->Arg(512))
KILN_PAIR(Softmax, Arg(4096))
// Issue 13, point 7: the fused eager kernels (KILN_EAGER_FUSED=0 runs the composites).
KILN_PAIR(LogSoftmax, Arg(4096))
KILN_PAIR(SoftmaxTrain, Arg(4096))
KILN_PAIR(LayerNorm, Arg(4096))
KILN_PAIR(LayerNormTrain, Arg(4096))
KILN_PAIR(GeluTanh, Arg(1 << 22))
KILN_PAIR(Where, Arg(1 << 22))

int main(int argc, char **argv) { return kiln::bench::run_peer_benchmarks(argc, argv); }
