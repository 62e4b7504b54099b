// One GPT training step: 2 pre-LayerNorm transformer blocks (d_model 128,
// 4 heads, causal attention, MLP 4x with GELU "tanh", dropout 0) on
// x [16, 64, 128], MSE loss against a fixed target, backward, AdamW.
// Kiln eager vs kiln::compile (f32, and bf16 autocast) vs LibTorch 1.13 eager
// (the same model written with torch::nn) in the same process. Run:
//
//   build/bench/kiln-bench-gpt --benchmark_out=bench/results/gpt.json --benchmark_out_format=json \
//       --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//   python3 bench/ratios.py bench/results/gpt.json
//   python3 bench/ratios.py bench/results/gpt.json --pair Compiled CompiledBf16   # f32 / bf16 autocast
//
// The same thread count for both: 2 (LibTorch's intra-op pool and oneDNN's
// GEMM threads). LibTorch's OpenBLAS misdetects this CPU unless
// OPENBLAS_CORETYPE is set before the process starts, so main() re-executes
// itself with OPENBLAS_CORETYPE=SkylakeX when it is missing (as
// bench_ops.cpp). When kiln::compile cannot capture the model yet, the
// compiled benchmark is skipped with the compiler's message.
//
// Checkpoint rematerialization: BM_KilnGptStepBudget/budget_pct:{100,50,0}
// (CompileOptions::memory_budget 1.0 / 0.5 / 0.0) and BM_KilnGptStepNoRemat
// report saved_bytes, both planned arenas, peak_activation_bytes (saved +
// max(forward arena, backward arena)) and recompute_flops; see
// bench/README.md and bench/remat_table.py.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <benchmark/benchmark.h>

#include "kiln/kiln.h"
#include "peer_main.h"

#ifdef KILN_HAVE_LIBTORCH
#include <torch/torch.h>
#endif

namespace {

constexpr int64_t kBatch = 16, kContext = 64, kDModel = 128, kHeads = 4, kLayers = 2;
constexpr double kLr = 1e-3;

// ---- Kiln ----------------------------------------------------------------------

namespace kn = kiln::nn;

class KilnBlock : public kn::Module {
public:
  KilnBlock() {
    ln1_ = register_module("ln_1", std::make_shared<kn::LayerNorm>(kiln::Shape{kDModel}));
    q_ = register_module("q_proj", std::make_shared<kn::Linear>(kDModel, kDModel));
    k_ = register_module("k_proj", std::make_shared<kn::Linear>(kDModel, kDModel));
    v_ = register_module("v_proj", std::make_shared<kn::Linear>(kDModel, kDModel));
    out_ = register_module("out_proj", std::make_shared<kn::Linear>(kDModel, kDModel));
    ln2_ = register_module("ln_2", std::make_shared<kn::LayerNorm>(kiln::Shape{kDModel}));
    fc_ = register_module("fc", std::make_shared<kn::Linear>(kDModel, 4 * kDModel));
    proj_ = register_module("proj", std::make_shared<kn::Linear>(4 * kDModel, kDModel));
  }
  kiln::Tensor forward(const kiln::Tensor &x) override {
    const int64_t B = x.size(0), T = x.size(1), hd = kDModel / kHeads;
    kiln::Tensor h = ln1_->forward(x);
    auto heads = [&](const kiln::Tensor &t) { return t.view({B, T, kHeads, hd}).transpose(1, 2); };
    kiln::Tensor y = kn::functional::scaled_dot_product_attention(heads(q_->forward(h)), heads(k_->forward(h)),
                                                                  heads(v_->forward(h)), kiln::Tensor(), 0.0,
                                                                  /*is_causal=*/true);
    kiln::Tensor r = x + out_->forward(y.transpose(1, 2).reshape({B, T, kDModel}));
    return r + proj_->forward(kiln::gelu(fc_->forward(ln2_->forward(r)), "tanh"));
  }
  std::string name() const override { return "Block"; }

private:
  std::shared_ptr<kn::LayerNorm> ln1_, ln2_;
  std::shared_ptr<kn::Linear> q_, k_, v_, out_, fc_, proj_;
};

/// `options` null: eager; else kiln::compile with these options.
void kiln_train_step(benchmark::State &state, const kiln::CompileOptions *options) {
  kiln::manual_seed(0);
  auto blocks = std::make_shared<kn::Sequential>();
  for (int64_t i = 0; i < kLayers; ++i) blocks->push_back(std::make_shared<KilnBlock>());
  std::shared_ptr<kn::Module> model = blocks;
  std::shared_ptr<kiln::CompiledModule> compiled;
  if (options) model = compiled = kiln::compile(blocks, *options);
  kiln::optim::AdamW opt(model->parameters(), kiln::optim::AdamWOptions(kLr));
  kiln::Tensor x = kiln::randn({kBatch, kContext, kDModel}), target = kiln::randn({kBatch, kContext, kDModel});
  auto step = [&] {
    opt.zero_grad();
    kiln::Tensor loss = kn::functional::mse_loss(model->forward(x), target);
    loss.backward();
    opt.step();
    return loss;
  };
  try {
    step();  // warm-up: the compiled variant traces and compiles here
  } catch (const kiln::Error &e) {
    state.SkipWithError(e.what());
    return;
  }
  auto &alloc = kiln::runtime::cpu_allocator();
  alloc.reset_peak_stats();
  const int64_t base = alloc.stats().current_bytes;
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.counters["peak_step_bytes"] = static_cast<double>(alloc.stats().peak_bytes - base);
  if (compiled) {
    // Activation memory of the compiled step, from the executables' memory
    // plans: what forward saves for backward (held from the end of forward
    // to the end of backward) plus the larger of the two planned arenas
    // (each live only while its function runs; intermediates that live in
    // the saved buffers -- forward's before they are written, backward's
    // donated ones after their last read -- are inside the saved bytes).
    const kiln::CompileStats &s = compiled->stats();
    state.counters["saved_bytes"] = static_cast<double>(s.saved_bytes);
    state.counters["forward_arena_bytes"] = static_cast<double>(s.forward_arena_bytes);
    state.counters["backward_arena_bytes"] = static_cast<double>(s.backward_arena_bytes);
    state.counters["peak_activation_bytes"] = static_cast<double>(s.peak_activation_bytes());
    state.counters["recompute_flops"] = static_cast<double>(s.recompute_flops);
    state.counters["fusions"] = s.num_fusions;
  }
  state.SetItemsProcessed(state.iterations() * kBatch * kContext);  // tokens
}

void BM_KilnGptStepEager(benchmark::State &state) { kiln_train_step(state, nullptr); }
void BM_KilnGptStepCompiled(benchmark::State &state) {
  const kiln::CompileOptions options;
  kiln_train_step(state, &options);
}
/// kiln::compile with CompileOptions::memory_budget = range(0) / 100.
void BM_KilnGptStepBudget(benchmark::State &state) {
  kiln::CompileOptions options;
  options.memory_budget = static_cast<double>(state.range(0)) / 100.0;
  kiln_train_step(state, &options);
}
/// kiln::compile without kiln-remat (save every forward value backward reads).
void BM_KilnGptStepNoRemat(benchmark::State &state) {
  kiln::CompileOptions options;
  options.remat = false;
  kiln_train_step(state, &options);
}
/// CompileOptions::autocast = bf16 (oneDNN bf16 GEMMs, f32 master weights):
/// python3 bench/ratios.py <json> --pair Compiled CompiledBf16
void BM_KilnGptStepCompiledBf16(benchmark::State &state) {
  kiln::CompileOptions options;
  options.autocast = kiln::kBFloat16;
  kiln_train_step(state, &options);
}

#ifdef KILN_HAVE_LIBTORCH
// ---- LibTorch -------------------------------------------------------------------

struct TorchBlockImpl : torch::nn::Module {
  TorchBlockImpl()
      : ln1(register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDModel})))),
        q(register_module("q_proj", torch::nn::Linear(kDModel, kDModel))),
        k(register_module("k_proj", torch::nn::Linear(kDModel, kDModel))),
        v(register_module("v_proj", torch::nn::Linear(kDModel, kDModel))),
        out(register_module("out_proj", torch::nn::Linear(kDModel, kDModel))),
        ln2(register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDModel})))),
        fc(register_module("fc", torch::nn::Linear(kDModel, 4 * kDModel))),
        proj(register_module("proj", torch::nn::Linear(4 * kDModel, kDModel))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    const int64_t B = x.size(0), T = x.size(1), hd = kDModel / kHeads;
    torch::Tensor h = ln1(x);
    auto heads = [&](const torch::Tensor &t) { return t.view({B, T, kHeads, hd}).transpose(1, 2); };
    // The math path of scaled_dot_product_attention (LibTorch 1.13 has no public sdpa).
    torch::Tensor scores = torch::matmul(heads(q(h)), heads(k(h)).transpose(-2, -1)) / std::sqrt(double(hd));
    torch::Tensor causal = torch::ones({T, T}, torch::kBool).tril();
    torch::Tensor y = torch::matmul(torch::softmax(scores.masked_fill(causal.logical_not(), -INFINITY), -1),
                                    heads(v(h)));
    torch::Tensor r = x + out(y.transpose(1, 2).reshape({B, T, kDModel}));
    return r + proj(torch::gelu(fc(ln2(r)), "tanh"));
  }
  torch::nn::LayerNorm ln1;
  torch::nn::Linear q, k, v, out;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc, proj;
};
TORCH_MODULE(TorchBlock);

void BM_TorchGptStepEager(benchmark::State &state) {
  torch::manual_seed(0);
  torch::nn::Sequential blocks;
  for (int64_t i = 0; i < kLayers; ++i) blocks->push_back(TorchBlock());
  torch::optim::AdamW opt(blocks->parameters(), torch::optim::AdamWOptions(kLr));
  torch::Tensor x = torch::randn({kBatch, kContext, kDModel}), target = torch::randn({kBatch, kContext, kDModel});
  auto step = [&] {
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(blocks->forward(x), target);
    loss.backward();
    opt.step();
    return loss;
  };
  step();
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.SetItemsProcessed(state.iterations() * kBatch * kContext);
}
#endif

}  // namespace

BENCHMARK(BM_KilnGptStepEager)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnGptStepCompiled)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnGptStepBudget)->ArgName("budget_pct")->Arg(100)->Arg(50)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnGptStepNoRemat)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KilnGptStepCompiledBf16)->Unit(benchmark::kMillisecond);
#ifdef KILN_HAVE_LIBTORCH
BENCHMARK(BM_TorchGptStepEager)->Unit(benchmark::kMillisecond);
#endif

int main(int argc, char **argv) {
  return kiln::bench::run_peer_benchmarks(
      argc, argv, {{"model", "2 GPT blocks, d_model 128, 4 heads, B16 T64, dropout 0, AdamW"}});
}
