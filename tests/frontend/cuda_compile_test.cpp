// Compiled graphs on CUDA (codegen/cuda/CudaTarget.cpp), proven on the
// CUDA-on-CPU simulator (KILN_CUDA_SIM=1): kiln::compile of a model on a
// CUDA device picks the CUDA target, and 20 AdamW steps of the compiled
// model (forward + loss + backward in one compiled graph; the optimizer
// eager on the device) match the CPU-compiled losses at 1e-4 relative;
// every kernel module of those graphs compiles with NVRTC to an sm_90 CUBIN
// without spills. Model sizes are small: the simulator is slow.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "kiln/codegen/CudaTarget.h"
#include "kiln/kiln.h"
#include "kiln/runtime/cuda/Nvrtc.h"
#include "models/cnn.h"
#include "models/gpt.h"

namespace kiln {
namespace {

const Device kCuda0{DeviceType::CUDA, 0};

class CudaCompile : public ::testing::Test {
protected:
  // The simulator, unless the device script runs this on a GPU (KILN_TEST_REAL_CUDA=1).
  void SetUp() override {
    if (!std::getenv("KILN_TEST_REAL_CUDA")) ::setenv("KILN_CUDA_SIM", "1", 1);
    codegen::cuda::recordGraphSources(true);
  }
};

/// model(x) followed by the cross-entropy against y (or, without y, the
/// mean square of the output): one compiled graph.
class WithLoss : public nn::Module {
public:
  explicit WithLoss(std::shared_ptr<nn::Module> model) : model_(register_module("model", std::move(model))) {}
  std::vector<Tensor> forward(const std::vector<Tensor> &in) override {
    Tensor logits = model_->forward(in[0]);
    if (in.size() == 1) // no labels: the mean square (its 1/N is a run-time scalar of a generic kernel)
      return {(logits * logits).mean()};
    return {nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), in[1])};
  }
  Tensor forward(const Tensor &) override { throw Error("WithLoss takes (x, y)"); }
  std::string name() const override { return "WithLoss"; }

private:
  std::shared_ptr<nn::Module> model_;
};

struct TrainRun {
  std::vector<double> losses;
  CompileStats stats;
  size_t graph_breaks = 0;
};

/// `steps` AdamW steps of compile(model + loss) on `device`; batch `batch(i)`
/// of step i (a changing batch size exercises the shape-generic kernels).
TrainRun compiled_losses(std::shared_ptr<nn::Module> model, const std::function<std::pair<Tensor, Tensor>(int)> &batch,
                    Device device, int steps, double lr, double clip, CompileOptions options = {}) {
  model->to(device);
  auto compiled = compile(std::make_shared<WithLoss>(model), options);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(lr).weight_decay(0.1));
  TrainRun run;
  for (int i = 0; i < steps; ++i) {
    auto [x, y] = batch(i);
    opt.zero_grad();
    std::vector<Tensor> inputs{x.to(device)};
    if (y.defined())
      inputs.push_back(y.to(device));
    Tensor loss = compiled->forward(inputs)[0];
    EXPECT_EQ(loss.device(), device);
    loss.backward();
    (void)nn::utils::clip_grad_norm_(model->parameters(), clip);
    opt.step();
    run.losses.push_back(loss.item());
    run.graph_breaks = std::max(run.graph_breaks, compiled->graph_breaks().size());
  }
  run.stats = compiled->stats();
  return run;
}

Tensor labels(int64_t n, int64_t classes) {
  return clamp(floor(rand({n}) * static_cast<double>(classes)), 0.0, static_cast<double>(classes - 1)).to(kInt64);
}

/// The CPU-compiled and CUDA-compiled runs agree at 1e-4 relative at every
/// step, compile without graph breaks, and training lowers the loss.
double expect_same_training(const std::function<TrainRun(Device)> &run) {
  const TrainRun cpu = run(kCPU);
  const auto start = std::chrono::steady_clock::now();
  const TrainRun cuda = run(kCuda0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(cuda.graph_breaks, 0u);
  EXPECT_GT(cuda.stats.num_fusions, 0);
  EXPECT_EQ(cuda.stats.eager_fallbacks, 0);
  double worst = 0;
  EXPECT_EQ(cpu.losses.size(), cuda.losses.size());
  for (size_t i = 0; i < cpu.losses.size() && i < cuda.losses.size(); ++i) {
    EXPECT_NEAR(cuda.losses[i], cpu.losses[i], 1e-4 * std::abs(cpu.losses[i])) << "step " << i + 1;
    worst = std::max(worst, std::abs(cuda.losses[i] - cpu.losses[i]) / std::abs(cpu.losses[i]));
  }
  EXPECT_LT(cuda.losses.back(), cuda.losses.front());
  std::printf("[cuda-compile] %zu steps: max relative loss difference vs cpu compiled %.3g; %d kernels in the last "
              "artifact, %d compiles, %.1f s on the simulator\n",
              cuda.losses.size(), worst, cuda.stats.num_fusions, cuda.stats.compiles, seconds);
  return worst;
}

std::shared_ptr<nn::Module> make_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

std::shared_ptr<nn::Module> make_gpt() {
  return std::make_shared<models::GPT>(/*vocab=*/11, /*context=*/8, /*layers=*/1, /*d_model=*/16, /*heads=*/2,
                                       /*dropout=*/0.0);
}

TEST_F(CudaCompile, CompileOnCudaPicksTheCudaTarget) {
  manual_seed(10);
  auto mlp = make_mlp();
  mlp->to(kCuda0);
  const size_t before = codegen::cuda::compiledGraphSources().size();
  auto compiled = compile(mlp);
  Tensor x = rand({4, 64}).to(kCuda0);
  Tensor y = compiled->forward(x);
  EXPECT_EQ(y.device(), kCuda0);
  EXPECT_EQ(compiled->stats().compiles, 1);
  EXPECT_GT(codegen::cuda::compiledGraphSources().size(), before);
  Tensor eager = mlp->forward(x);
  const std::vector<float> a = y.cpu().to_vector<float>(), b = eager.cpu().to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
}

/// A 64-128-10 ReLU MLP with cross-entropy, 20 steps.
TEST_F(CudaCompile, MlpTrainingMatchesCpuCompiledFor20Steps) {
  expect_same_training([](Device d) {
    manual_seed(11);
    auto mlp = make_mlp();
    Tensor x = rand({32, 64}), y = labels(32, 10);
    return compiled_losses(mlp, [&](int) { return std::make_pair(x, y); }, d, 20, 2e-3, 1e9);
  });
}

/// The MLP with the mean square of its output as the loss and the batch
/// size changing (32, 16, then 24 and 8 ...): from the third size on, the
/// shape-generic CUDA kernels (sizes as arguments) serve every size.
TEST_F(CudaCompile, MlpWithDynamicBatchMatchesCpuCompiled) {
  TrainRun last;
  expect_same_training([&](Device d) {
    manual_seed(12);
    auto mlp = make_mlp();
    const int64_t sizes[] = {32, 16, 24, 8};
    std::vector<std::pair<Tensor, Tensor>> batches;
    for (int64_t b : sizes)
      batches.emplace_back(rand({b, 64}), Tensor());
    last = compiled_losses(mlp, [&](int i) { return batches[static_cast<size_t>(i) % 4]; }, d, 12, 2e-3, 1e9);
    return last;
  });
  EXPECT_GT(last.stats.dynamic_instantiations, 0);
}

/// A small GPT (examples/models/gpt.h: embedding, layer_norm, causal
/// attention with softmax, GELU, cross-entropy), 20 steps.
TEST_F(CudaCompile, GptTrainingMatchesCpuCompiledFor20Steps) {
  expect_same_training([](Device d) {
    manual_seed(13);
    auto gpt = make_gpt();
    Tensor x = labels(16, 11).reshape({2, 8}), y = labels(16, 11);
    return compiled_losses(gpt, [&](int) { return std::make_pair(x, y); }, d, 20, 3e-3, 1.0);
  });
}

/// The same GPT with memory_budget 0.5 (kiln-remat recomputes in backward).
TEST_F(CudaCompile, GptWithHalfMemoryBudgetMatchesCpuCompiled) {
  CompileOptions options;
  options.memory_budget = 0.5;
  expect_same_training([&](Device d) {
    manual_seed(14);
    auto gpt = make_gpt();
    Tensor x = labels(16, 11).reshape({2, 8}), y = labels(16, 11);
    return compiled_losses(gpt, [&](int) { return std::make_pair(x, y); }, d, 20, 3e-3, 1.0, options);
  });
}

/// The zoo's residual digits CNN (examples/models/cnn.h: conv2d, batch_norm
/// with its running statistics, max and average pooling) at a small width,
/// 10 steps: convolution and pooling run through the CUDA backend's ops.
TEST_F(CudaCompile, CnnTrainingMatchesCpuCompiledFor10Steps) {
  expect_same_training([](Device d) {
    manual_seed(16);
    auto cnn = std::make_shared<models::DigitsCNN>(4);
    Tensor x = rand({8, 1, 8, 8}), y = labels(8, 10);
    return compiled_losses(cnn, [&](int) { return std::make_pair(x, y); }, d, 10, 1e-2, 1e9);
  });
}

/// Every CUDA module compiled in this process (the tests above, when run in
/// one process; else the GPT's here) compiles with NVRTC to a non-empty
/// sm_90 CUBIN with 0 spills in every kernel.
TEST_F(CudaCompile, EveryCompiledKernelCompilesForSm90WithoutSpills) {
  if (codegen::cuda::compiledGraphSources().empty()) {
    manual_seed(15);
    (void)compiled_losses(make_gpt(), [](int) { return std::make_pair(labels(16, 11).reshape({2, 8}), labels(16, 11)); },
                          kCuda0, 1, 3e-3, 1.0);
  }
  runtime::cuda::NvrtcCompilerOptions options;
  options.cache_dir = ""; // no disk cache: the point is to compile
  runtime::cuda::NvrtcCompiler nvrtc(options);
  int kernels = 0;
  std::vector<runtime::cuda::KernelSource> sources;
  for (const codegen::cuda::CompiledGraphSource &module : codegen::cuda::compiledGraphSources())
    sources.push_back(runtime::cuda::KernelSource{module.source, module.kernel_names, "kiln_graph.cu"});
  try {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<runtime::cuda::CompiledModule> modules = nvrtc.compile_batch(sources, 90, 2);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (size_t u = 0; u < modules.size(); ++u) {
      const runtime::cuda::CompiledModule &m = modules[u];
      EXPECT_GT(m.binary.size(), 0u);
      for (const std::string &name : sources[u].kernel_names) {
        const runtime::cuda::KernelResources *r = m.kernel(name);
        ASSERT_NE(r, nullptr) << name << "\n" << m.log;
        EXPECT_EQ(r->spill_store_bytes + r->spill_load_bytes, 0) << name << "\n" << m.log;
        ++kernels;
      }
    }
    std::printf("[cuda-compile] NVRTC sm_90: %d kernels in %zu translation units in %.2f s on 2 threads\n", kernels,
                sources.size(), seconds);
  } catch (const std::exception &e) {
    ADD_FAILURE() << e.what();
  }
  EXPECT_GT(kernels, 0);
}

/// A graph's kernels are split into translation units, one per compiling
/// thread with at least 4 kernels each (CudaTarget.cpp translationUnits),
/// the prelude once per unit, each kernel in exactly one.
TEST_F(CudaCompile, GraphKernelsAreSplitIntoSeveralTranslationUnits) {
  const size_t before = codegen::cuda::compiledGraphSources().size();
  manual_seed(17);
  (void)compiled_losses(make_gpt(), [](int) { return std::make_pair(labels(16, 11).reshape({2, 8}), labels(16, 11)); },
                        kCuda0, 1, 3e-3, 1.0);
  const std::vector<codegen::cuda::CompiledGraphSource> all = codegen::cuda::compiledGraphSources();
  ASSERT_GT(all.size(), before);
  std::map<size_t, std::vector<const codegen::cuda::CompiledGraphSource *>> graphs;
  for (size_t i = before; i < all.size(); ++i) graphs[all[i].graph].push_back(&all[i]);
  bool some_split = false;
  for (const auto &[graph, units] : graphs) {
    std::set<std::string> names;
    size_t kernels = 0;
    for (const auto *unit : units) {
      EXPECT_EQ(unit->source.rfind(codegen::cuda::graphPrelude(), 0), 0u) << "each unit starts with the prelude";
      EXPECT_GE(unit->kernel_names.size(), 1u);
      for (const std::string &n : unit->kernel_names) {
        EXPECT_NE(unit->source.find(n), std::string::npos) << n;
        names.insert(n);
        ++kernels;
      }
    }
    EXPECT_EQ(names.size(), kernels) << "a kernel in two units of graph " << graph;
    const size_t threads = std::max(1u, std::thread::hardware_concurrency());
    EXPECT_EQ(units.size(), std::min<size_t>({(kernels + 3) / 4, threads, kernels})) << "graph " << graph;
    some_split |= units.size() > 1;
  }
  if (std::thread::hardware_concurrency() > 1)
    EXPECT_TRUE(some_split) << "the GPT training graph is several translation units";
}

} // namespace
} // namespace kiln

namespace kiln {
namespace {

/// Linear -> GELU("tanh") -> Linear -> ReLU, inference.
std::shared_ptr<nn::Module> make_epilogue_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(24, 40), std::make_shared<nn::GELU>("tanh"), std::make_shared<nn::Linear>(40, 8),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 5)});
}

TEST_F(CudaCompile, InferenceMlpMatchesCpuCompiled) {
  manual_seed(21);
  auto cpu = make_epilogue_mlp();
  cpu->eval();
  Tensor x = randn({6, 24});
  autograd::NoGradGuard no_grad;
  Tensor want = compile(cpu)->forward(x);
  cpu->to(kCuda0);
  auto compiled = compile(cpu);
  Tensor got = compiled->forward(x.to(kCuda0));
  const std::vector<float> a = got.cpu().to_vector<float>(), b = want.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
  // Every Linear's bias and activation is in its GEMM's epilogue (cuBLASLt's
  // BIAS / GELU_BIAS / RELU_BIAS; the simulator applies the same math).
  const std::string report = compiled->describe(x.to(kCuda0));
  EXPECT_NE(report.find("fusion_0: bias+gelu;"), std::string::npos) << report;
  EXPECT_NE(report.find("fusion_1: bias+relu;"), std::string::npos) << report;
  EXPECT_NE(report.find("fusion_2: bias;"), std::string::npos) << report;
  std::printf("[cuda-compile] %s", report.c_str());
}

/// The same model with the epilogues folded (the simulator's GEMM with
/// cuBLASLt's BIAS / GELU_BIAS / RELU_BIAS math) equals the unfused ops run
/// eagerly on the same device (a GEMM, then the bias add and GELU kernels);
/// against the unfused CPU graph: InferenceMlpMatchesCpuCompiled.
TEST_F(CudaCompile, BiasGeluFoldedIntoTheGemmEpilogueEqualsUnfused) {
  manual_seed(22);
  auto model = make_epilogue_mlp();
  model->eval();
  model->to(kCuda0);
  Tensor x = randn({6, 24}).to(kCuda0);
  autograd::NoGradGuard no_grad;
  Tensor unfused = model->forward(x);  // eager: the GEMM, then the bias add and GELU kernels
  auto compiled = compile(model);
  Tensor folded = compiled->forward(x);
  EXPECT_EQ(compiled->stats().num_fusions, 3);
  const std::vector<float> a = folded.cpu().to_vector<float>(), b = unfused.cpu().to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / (1 + std::abs(b[i])));
  }
  std::printf("[cuda-compile] epilogue-folded vs eager: max |diff| / (1 + |ref|) = %.3g\n", worst);
}

} // namespace
} // namespace kiln

// CompileOptions::cuda_graphs on the simulator: the compiled forward and
// backward captured once into a CUDA graph and replayed, against the same
// training with stream launches (cuda_graphs = false) and the CPU target.
namespace kiln {
namespace {

/// LayerNorm(32) -> GELU with the mean square as the loss: row kernels and
/// column reductions only, no GEMM (the simulator's GEMM is a host fallback
/// that synchronizes the stream, which a capture refuses, as on a GPU a
/// host sync would be).
std::shared_ptr<nn::Module> make_norm_gelu() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::LayerNorm>(Shape{32}), std::make_shared<nn::GELU>("tanh")});
}

struct GraphRuns {
  TrainRun cpu, on, off;
  std::string explain_on;
};

/// The training `run(device, options)` on the CPU, on cuda-sim with CUDA
/// graphs on and off: every step's loss within 1e-4 relative of the CPU's;
/// on and off bit for bit (the replay runs the same kernels on the same data).
GraphRuns expect_graphs_on_off_and_cpu_agree(
    const std::function<TrainRun(Device, const CompileOptions &, std::string *)> &run) {
  GraphRuns r;
  CompileOptions on, off;
  off.cuda_graphs = false;
  r.cpu = run(kCPU, on, nullptr);
  auto t0 = std::chrono::steady_clock::now();
  r.on = run(kCuda0, on, &r.explain_on);
  auto t1 = std::chrono::steady_clock::now();
  r.off = run(kCuda0, off, nullptr);
  auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(r.on.losses.size(), r.cpu.losses.size());
  EXPECT_EQ(r.off.losses.size(), r.cpu.losses.size());
  double worst_on = 0, worst_off = 0, worst_on_off = 0;
  for (size_t i = 0; i < r.cpu.losses.size() && i < r.on.losses.size() && i < r.off.losses.size(); ++i) {
    const double c = r.cpu.losses[i];
    EXPECT_NEAR(r.on.losses[i], c, 1e-4 * std::abs(c)) << "graphs on, step " << i + 1;
    EXPECT_NEAR(r.off.losses[i], c, 1e-4 * std::abs(c)) << "graphs off, step " << i + 1;
    EXPECT_EQ(r.on.losses[i], r.off.losses[i]) << "on vs off not bit-equal at step " << i + 1;
    worst_on = std::max(worst_on, std::abs(r.on.losses[i] - c) / std::abs(c));
    worst_off = std::max(worst_off, std::abs(r.off.losses[i] - c) / std::abs(c));
    worst_on_off = std::max(worst_on_off, std::abs(r.on.losses[i] - r.off.losses[i]));
  }
  EXPECT_EQ(r.off.stats.cuda_graph_captures + r.off.stats.cuda_graph_replays + r.off.stats.cuda_graph_fallbacks, 0);
  std::printf("[cuda-graphs] %zu steps: max rel diff vs cpu: graphs on %.3g, off %.3g; |on - off| max %.3g; "
              "captures %d, replays %d, fallbacks %d, pool %lld bytes; %.1f s on, %.1f s off\n",
              r.cpu.losses.size(), worst_on, worst_off, worst_on_off, r.on.stats.cuda_graph_captures,
              r.on.stats.cuda_graph_replays, r.on.stats.cuda_graph_fallbacks,
              static_cast<long long>(r.on.stats.cuda_graph_pool_bytes),
              std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
  return r;
}

/// compiled_losses, with `options`, and the explain report of the last batch.
TrainRun train_with(std::shared_ptr<nn::Module> model, const std::function<std::pair<Tensor, Tensor>(int)> &batch,
                    Device device, int steps, double lr, double clip, const CompileOptions &options,
                    std::string *explain_out) {
  model->to(device);
  auto compiled = compile(std::make_shared<WithLoss>(model), options);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(lr).weight_decay(0.1));
  TrainRun run;
  for (int i = 0; i < steps; ++i) {
    auto [x, y] = batch(i);
    opt.zero_grad();
    std::vector<Tensor> inputs{x.to(device)};
    if (y.defined()) inputs.push_back(y.to(device));
    Tensor loss = compiled->forward(inputs)[0];
    loss.backward();
    (void)nn::utils::clip_grad_norm_(model->parameters(), clip);
    opt.step();
    run.losses.push_back(loss.item());
  }
  run.stats = compiled->stats();
  if (explain_out) {
    auto [x, y] = batch(steps - 1);
    (void)y;
    *explain_out = compiled->describe(x.to(device));
  }
  return run;
}

/// Forward and backward each captured once (after one warm-up step) and
/// replayed on every one of the other `steps - 1` steps, with no fallback.
void expect_captured_once_then_replayed(const GraphRuns &r, int steps) {
  EXPECT_EQ(r.on.stats.cuda_graph_captures, 2);
  EXPECT_EQ(r.on.stats.cuda_graph_replays, 2 * (steps - 1));
  EXPECT_EQ(r.on.stats.cuda_graph_fallbacks, 0);
}

/// 20 steps of a GEMM-free model: forward and backward each captured once
/// (after one warm-up step) and replayed on every later step: 2 captures,
/// 38 replays, no fallback; the losses bit-equal to stream launches.
TEST_F(CudaCompile, CudaGraphsCaptureOnceAndReplay20Steps) {
  GraphRuns r = expect_graphs_on_off_and_cpu_agree([](Device d, const CompileOptions &o, std::string *ex) {
    manual_seed(31);
    Tensor x = randn({8, 32});
    return train_with(make_norm_gelu(), [&](int) { return std::make_pair(x, Tensor()); }, d, 20, 1e-2, 1e9, o, ex);
  });
  expect_captured_once_then_replayed(r, 20);
  EXPECT_GT(r.on.stats.cuda_graph_pool_bytes, 0);
  EXPECT_NE(r.explain_on.find("cuda graphs: 2 captured"), std::string::npos) << r.explain_on;
  std::printf("[cuda-graphs] %s", r.explain_on.c_str());
}

/// Two input shapes (static: automatic_dynamic_shapes off) alternate: four
/// graphs (forward and backward per shape), ONE pool; the pool's reserved
/// bytes with both shapes captured are those with one (the second shape's
/// graphs reuse the first's freed arena blocks).
TEST_F(CudaCompile, CudaGraphsTwoShapesShareOnePool) {
  manual_seed(32);
  auto model = make_norm_gelu();
  model->to(kCuda0);
  CompileOptions options;
  options.automatic_dynamic_shapes = false;
  auto compiled = compile(std::make_shared<WithLoss>(model), options);
  Tensor a = randn({8, 32}).to(kCuda0), b = randn({16, 32}).to(kCuda0);
  auto step = [&](const Tensor &x) {
    Tensor loss = compiled->forward(std::vector<Tensor>{x})[0];
    loss.backward();
    return loss.item();
  };
  // Shape a: warm-up, capture, replay.
  for (int i = 0; i < 3; ++i) step(a);
  const int64_t one_shape = compiled->stats().cuda_graph_pool_bytes;
  for (int i = 0; i < 3; ++i) step(b);
  const int64_t two_shapes = compiled->stats().cuda_graph_pool_bytes;
  // Alternating replays of both shapes keep giving the stream-launch results.
  const double la = step(a), lb = step(b);
  CompileOptions off = options;
  off.cuda_graphs = false;
  auto plain = compile(std::make_shared<WithLoss>(model), off);
  EXPECT_EQ(la, plain->forward(std::vector<Tensor>{a})[0].item());
  EXPECT_EQ(lb, plain->forward(std::vector<Tensor>{b})[0].item());
  const CompileStats &s = compiled->stats();
  EXPECT_EQ(s.cuda_graph_captures, 4);
  EXPECT_EQ(s.cuda_graph_fallbacks, 0);
  EXPECT_GT(one_shape, 0);
  EXPECT_LE(two_shapes, 2 * one_shape);
  std::printf("[cuda-graphs] two shapes, one pool: %lld bytes reserved after shape 1, %lld after shape 2; %d replays\n",
              static_cast<long long>(one_shape), static_cast<long long>(two_shapes), s.cuda_graph_replays);
}

/// 20 steps of the MLP with CUDA graphs on and off against the CPU.
TEST_F(CudaCompile, MlpTrainingWithCudaGraphsOnOffMatchesCpu) {
  GraphRuns r = expect_graphs_on_off_and_cpu_agree([](Device d, const CompileOptions &o, std::string *ex) {
    manual_seed(11);
    auto mlp = make_mlp();
    Tensor x = rand({32, 64}), y = labels(32, 10);
    return train_with(mlp, [&](int) { return std::make_pair(x, y); }, d, 20, 2e-3, 1e9, o, ex);
  });
  std::printf("[cuda-graphs] %s", r.explain_on.c_str());
  // The GEMMs (on the simulator: host functions on the stream, host nodes
  // in the graph) are captured: forward and backward replayed 19 times each.
  expect_captured_once_then_replayed(r, 20);
}

TEST_F(CudaCompile, GptTrainingWithCudaGraphsOnOffMatchesCpu) {
  GraphRuns r = expect_graphs_on_off_and_cpu_agree([](Device d, const CompileOptions &o, std::string *ex) {
    manual_seed(13);
    auto gpt = make_gpt();
    Tensor x = labels(16, 11).reshape({2, 8}), y = labels(16, 11);
    return train_with(gpt, [&](int) { return std::make_pair(x, y); }, d, 20, 3e-3, 1.0, o, ex);
  });
  std::printf("[cuda-graphs] %s", r.explain_on.c_str());
  // Embedding gathers check their indices: the status words are read after
  // each replay (copied aside inside the graph), so the GPT is captured too.
  expect_captured_once_then_replayed(r, 20);
}

/// A capture that fails (here a host synchronize of the capturing stream,
/// injected by KILN_CUDA_GRAPHS_TEST_SYNC_IN_CAPTURE, as an op that cannot
/// be captured would do) falls back to stream launches for that shape, with
/// CUDA's reason in explain, and trains exactly as graphs off.
TEST_F(CudaCompile, CudaGraphsCaptureFailureFallsBackWithTheReason) {
  ::setenv("KILN_CUDA_GRAPHS_TEST_SYNC_IN_CAPTURE", "1", 1);
  GraphRuns r = expect_graphs_on_off_and_cpu_agree([](Device d, const CompileOptions &o, std::string *ex) {
    manual_seed(34);
    Tensor x = randn({8, 32});
    return train_with(make_norm_gelu(), [&](int) { return std::make_pair(x, Tensor()); }, d, 6, 1e-2, 1e9, o, ex);
  });
  ::unsetenv("KILN_CUDA_GRAPHS_TEST_SYNC_IN_CAPTURE");
  EXPECT_EQ(r.on.stats.cuda_graph_captures, 0);
  EXPECT_EQ(r.on.stats.cuda_graph_replays, 0);
  EXPECT_EQ(r.on.stats.cuda_graph_fallbacks, 2);
  EXPECT_NE(r.explain_on.find("fell back to stream launches: "), std::string::npos) << r.explain_on;
  EXPECT_NE(r.explain_on.find("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"), std::string::npos) << r.explain_on;
  std::printf("[cuda-graphs] %s", r.explain_on.c_str());
}

/// Shape-generic (automatic dynamic) artifacts never use CUDA graphs; explain says so.
TEST_F(CudaCompile, CudaGraphsNotUsedByShapeGenericArtifacts) {
  manual_seed(33);
  auto model = make_norm_gelu();
  model->to(kCuda0);
  auto compiled = compile(std::make_shared<WithLoss>(model));
  for (int64_t n : {8, 16, 24}) (void)compiled->forward(std::vector<Tensor>{randn({n, 32}).to(kCuda0)});
  const std::string report = compiled->describe(randn({24, 32}).to(kCuda0));
  EXPECT_NE(report.find("shape-generic artifact"), std::string::npos) << report;
  EXPECT_GT(compiled->stats().dynamic_instantiations + 1, 0);
}

} // namespace
} // namespace kiln

// The training epilogues (cuBLASLt's GELU_AUX_BIAS forward, DGELU_BGRAD
// backward) on the simulator: one training step of Linear-GELU-Linear with
// the folds equals the same graph unfolded (KILN_GEMM_EPILOGUES=0) and the
// CPU target.
namespace kiln {
namespace {

struct TrainStep {
  double loss = 0;
  std::vector<std::vector<float>> grads; ///< per parameter, in parameters() order
  std::string report;                    ///< kiln::explain
  int forward_launches = 0, backward_launches = 0;
};

/// The "<n> launches" counts of explain's memory plan line (forward, backward).
std::pair<int, int> launch_counts(const std::string &report) {
  const size_t plan = report.find("memory plan:");
  const size_t f = report.find(" launches;", plan), b = report.find(" launches", f + 1);
  auto number_before = [&](size_t end) {
    size_t start = report.rfind(' ', end - 1) + 1;
    return std::atoi(report.substr(start, end - start).c_str());
  };
  return {number_before(f), number_before(b)};
}

/// The Linear-GELU-Linear of the training-epilogue tests.
struct GeluMlp {
  int64_t hidden = 40; ///< the first Linear's out_features: N of the folded GEMMs
  bool bias = true;    ///< the first Linear's bias
};

/// One forward + backward of compile(Linear(24, hidden) -> GELU("tanh") ->
/// Linear(hidden, 8) + mean square) on `device`; `folds` sets KILN_GEMM_EPILOGUES.
TrainStep gelu_mlp_step(Device device, bool folds, DType dtype = kFloat32, GeluMlp shape = {}) {
  ::setenv("KILN_GEMM_EPILOGUES", folds ? "1" : "0", 1);
  manual_seed(30);
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(24, shape.hidden, shape.bias), std::make_shared<nn::GELU>("tanh"),
      std::make_shared<nn::Linear>(shape.hidden, 8)});
  Tensor x = randn({6, 24}).to(dtype);
  model->to(dtype);
  model->to(device);
  auto compiled = compile(std::make_shared<WithLoss>(model));
  Tensor loss = compiled->forward(std::vector<Tensor>{x.to(device)})[0];
  loss.backward();
  TrainStep step;
  step.loss = loss.item();
  for (const Tensor &p : model->parameters())
    step.grads.push_back(p.grad().cpu().to(kFloat32).to_vector<float>());
  step.report = compiled->describe(x.to(device));
  std::tie(step.forward_launches, step.backward_launches) = launch_counts(step.report);
  ::unsetenv("KILN_GEMM_EPILOGUES");
  return step;
}

/// max over parameters of max|got - want| / max|want| (each gradient's
/// error relative to its scale: an entry near zero is a sum that cancels,
/// whose own relative error says nothing about the fold).
double worst_relative(const std::vector<std::vector<float>> &got, const std::vector<std::vector<float>> &want) {
  double worst = 0;
  EXPECT_EQ(got.size(), want.size());
  for (size_t p = 0; p < got.size() && p < want.size(); ++p) {
    EXPECT_EQ(got[p].size(), want[p].size());
    double scale = 1e-30, error = 0;
    for (size_t i = 0; i < got[p].size() && i < want[p].size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::abs(want[p][i])));
      error = std::max(error, std::abs(static_cast<double>(got[p][i]) - want[p][i]));
    }
    worst = std::max(worst, error / scale);
  }
  return worst;
}

TEST_F(CudaCompile, TrainingGeluEpiloguesFoldAndMatchUnfusedAndCpu) {
  const TrainStep cpu = gelu_mlp_step(kCPU, true);
  const TrainStep off = gelu_mlp_step(kCuda0, false);
  const TrainStep on = gelu_mlp_step(kCuda0, true);
  const TrainStep f64 = gelu_mlp_step(kCPU, true, kFloat64);
  // Forward: fusion_0 (bias + GELU, also yielding the pre-activation saved
  // for backward) is GELU_AUX_BIAS; backward: GELU's gradient and its
  // column sum (the first Linear's bias gradient) after the input-gradient
  // GEMM are DGELU_BGRAD.
  EXPECT_NE(on.report.find("fusion_0: bias+gelu+aux;"), std::string::npos) << on.report;
  EXPECT_NE(on.report.find(": dgelu+bgrad;"), std::string::npos) << on.report;
  EXPECT_EQ(off.report.find("GEMM epilogues"), std::string::npos) << off.report;
  EXPECT_EQ(on.forward_launches, off.forward_launches - 1) << on.report;
  EXPECT_EQ(on.backward_launches, off.backward_launches - 1) << on.report;
  const double vs_off = worst_relative(on.grads, off.grads), vs_cpu = worst_relative(on.grads, cpu.grads);
  const double vs_f64 = worst_relative(on.grads, f64.grads), off_vs_f64 = worst_relative(off.grads, f64.grads);
  EXPECT_LE(vs_off, 1e-5);
  EXPECT_LE(vs_cpu, 1e-5);
  EXPECT_LE(vs_f64, 1e-5);
  EXPECT_NEAR(on.loss, cpu.loss, 1e-5 * std::abs(cpu.loss));
  EXPECT_NEAR(on.loss, off.loss, 1e-5 * std::abs(off.loss));
  std::printf(
      "[cuda-compile] training GELU epilogues: launches forward %d -> %d, backward %d -> %d; gradients max "
      "relative difference vs unfolded %.3g, vs cpu %.3g, vs a float64 cpu run %.3g (unfolded: %.3g); loss %.9g "
      "(cpu %.9g)\n",
      off.forward_launches, on.forward_launches, off.backward_launches, on.backward_launches, vs_off, vs_cpu, vs_f64,
      off_vs_f64, on.loss, cpu.loss);
}

/// Without the first Linear's bias the forward has no bias to fold (a bare
/// GELU after the GEMM is not matched) and the backward has no bias
/// gradient: DGELU alone. With N = 36 (not a multiple of 8, cuBLASLt's
/// AUX_LD rule) neither GELU fold is taken; both still train the same.
TEST_F(CudaCompile, TrainingGeluEpiloguesWithoutBiasOrWithAnOddWidth) {
  const GeluMlp no_bias{40, false}, odd{36, true};
  const TrainStep on = gelu_mlp_step(kCuda0, true, kFloat32, no_bias);
  const TrainStep cpu = gelu_mlp_step(kCPU, true, kFloat32, no_bias);
  EXPECT_NE(on.report.find(": dgelu;"), std::string::npos) << on.report;
  EXPECT_EQ(on.report.find("bias+gelu"), std::string::npos) << on.report;
  const double no_bias_vs_cpu = worst_relative(on.grads, cpu.grads);
  EXPECT_LE(no_bias_vs_cpu, 1e-5);
  const TrainStep odd_on = gelu_mlp_step(kCuda0, true, kFloat32, odd);
  const TrainStep odd_cpu = gelu_mlp_step(kCPU, true, kFloat32, odd);
  EXPECT_EQ(odd_on.report.find("gelu"), std::string::npos) << odd_on.report;
  const double odd_vs_cpu = worst_relative(odd_on.grads, odd_cpu.grads);
  EXPECT_LE(odd_vs_cpu, 1e-5);
  std::printf(
      "[cuda-compile] dgelu without bias: gradients vs cpu %.3g (backward launches %d); N = 36 unfolded: %.3g\n",
      no_bias_vs_cpu, on.backward_launches, odd_vs_cpu);
}

} // namespace
} // namespace kiln
