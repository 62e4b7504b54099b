// One SGD training step of a small CNN (conv-BN-ReLU, conv-BN + residual,
// ReLU, max pool, conv-ReLU, avg pool, linear; batch 16 of 3x16x16): Kiln
// eager vs kiln::compile in the same process (issue 13, "conv ops compiled").
// Run:
//   build/bench/kiln-bench --benchmark_filter=Cnn --benchmark_out=bench/results/cnn.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

using namespace kiln;

namespace {

struct BenchCnn : nn::Module {
  std::shared_ptr<nn::Conv2d> c1, c2, c3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Linear> fc;
  BenchCnn() {
    manual_seed(0);
    c1 = register_module("c1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 16, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(16));
    c2 = register_module("c2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 16, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(16));
    c3 = register_module("c3", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(16, 32, 3).padding(1)));
    fc = register_module("fc", std::make_shared<nn::Linear>(32 * 4 * 4, 10));
  }
  Tensor forward(const Tensor &x) override {
    namespace F = nn::functional;
    Tensor h = relu(bn1->forward(c1->forward(x)));
    h = relu(bn2->forward(c2->forward(h)) + h);
    h = F::max_pool2d(h, {2, 2});
    h = F::avg_pool2d(relu(c3->forward(h)), {2, 2});
    return fc->forward(h.reshape({x.size(0), -1}));
  }
  std::string name() const override { return "BenchCnn"; }
};

void run_cnn_steps(benchmark::State &state, bool compiled) {
  const int64_t batch = state.range(0);
  std::shared_ptr<nn::Module> model = std::make_shared<BenchCnn>();
  std::shared_ptr<CompiledModule> cm;
  if (compiled) model = cm = compile(model);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  manual_seed(1);
  Tensor x = randn({batch, 3, 16, 16});
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
  for (auto _ : state) benchmark::DoNotOptimize(step());
  if (cm) state.counters["graph_breaks"] = static_cast<double>(cm->graph_breaks().size());
  if (cm) state.counters["kernels"] = static_cast<double>(cm->stats().num_fusions);
  state.SetItemsProcessed(state.iterations() * batch);
}

void BM_CnnStepEager(benchmark::State &state) { run_cnn_steps(state, false); }
void BM_CnnStepCompiled(benchmark::State &state) { run_cnn_steps(state, true); }

}  // namespace

BENCHMARK(BM_CnnStepEager)->Arg(16)->Unit(benchmark::kMillisecond)->Repetitions(3)->ReportAggregatesOnly(true);
BENCHMARK(BM_CnnStepCompiled)->Arg(16)->Unit(benchmark::kMillisecond)->Repetitions(3)->ReportAggregatesOnly(true);
