// One AdamW training step of the digits MLP (64-128-10, batch 64): Kiln eager
// vs kiln::compile, in the same process. Run:
//   build/bench/kiln-bench --benchmark_out=bench/results.json --benchmark_out_format=json
//   python3 bench/ratios.py bench/results.json
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

std::shared_ptr<nn::Sequential> make_mlp() {
  manual_seed(0);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

void run_training_steps(benchmark::State &state, bool compiled) {
  const int64_t batch = state.range(0);
  std::shared_ptr<nn::Module> model = make_mlp();
  if (compiled) model = compile(model);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(1e-3));
  manual_seed(1);
  Tensor x = rand({batch, 64});
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[i] = i % 10;
  Tensor y = tensor(labels, {batch});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  step();  // warm-up: the compiled variant traces and compiles here
  auto &alloc = runtime::cpu_allocator();
  alloc.reset_peak_stats();
  const int64_t base = alloc.stats().current_bytes;
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.counters["peak_step_bytes"] = static_cast<double>(alloc.stats().peak_bytes - base);
  state.SetItemsProcessed(state.iterations() * batch);
}

void BM_TrainStepEager(benchmark::State &state) { run_training_steps(state, false); }
void BM_TrainStepCompiled(benchmark::State &state) { run_training_steps(state, true); }

}  // namespace

BENCHMARK(BM_TrainStepEager)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TrainStepCompiled)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
