// kiln-bench-gpt-cuda: the GPT training step (examples/models/gpt.h:
// forward, cross-entropy, backward, AdamW) on CUDA device 0, as JSON, for
// bench/gpu/run_checks.sh (issue 16 item 7; bench/gpu/torch_peer.py --gpt
// runs the same model in PyTorch eager and torch.compile on the same GPU).
//
//   kiln-bench-gpt-cuda [--layers 12] [--d-model 768] [--heads 12] [--context 1024]
//                       [--batch 16] [--vocab 50304] [--steps 20] [--warmup 3]
//                       [--modes eager,compiled,graphs,budget05] [--autocast bf16|off]
//                       [--kernels] [--perf-report] [--tiny] [--out gpt.json]
//
// Modes: eager (Kiln eager CUDA, under AutocastGuard when --autocast bf16),
// compiled (kiln::compile of model + loss, CompileOptions::autocast,
// memory_budget 1, CompileOptions::cuda_graphs off: stream launches), graphs
// (the same with CompileOptions::cuda_graphs on: captured once, replayed),
// budget05 (compiled at memory_budget 0.5, graphs on). Per mode: the median ms/step of --steps
// timed steps after --warmup (each step ends in kiln::cuda::synchronize and
// a steady clock read), tokens/s, model-FLOPs utilization against 990 TFLOP/s
// dense bf16 (FLOPs/step = (6 N + 12 L D T) B T, nanoGPT's estimate: N the
// parameters minus the embeddings' tables), peak memory
// (kiln::cuda::max_memory_allocated over the timed steps); compiled modes
// also the cold compile (CompileStats::last_compile_seconds of the first
// call, with an empty KILN_CACHE_DIR the first time: the binary points it at
// a fresh directory unless --keep-cache) and the warm compile (a second
// compile() of the same model and options in this process: the kernel cache
// is warm).
//
// --kernels: per-kernel bandwidth at the model's shapes (B T rows of D):
// a copy (x.clone(), the emitter's copy kernel), the fused row kernels of a
// compiled forward-only module each (layer_norm, residual add + layer_norm,
// softmax over T x T rows of the attention, GELU(tanh)), bytes = inputs read
// once + outputs written once, GB/s against the copy and 4.8 TB/s; the GEMMs
// of the step (bf16 [BT, D] x [D, 4D], [BT, 4D] x [4D, D], [BT, D] x
// [D, vocab]) compiled with bias+GELU (or bias) epilogue against eager
// kiln::matmul alone (cuBLASLt plain matmul at the same shapes), TFLOP/s.
//
// --perf-report: per compiled mode, "perf_report": the static model of
// every launch of the step's forward and backward (kiln::kernel_perf,
// kiln/codegen/PerfModel.h: bytes, FLOPs, ptxas registers and spills,
// occupancy, roofline seconds on an H200) and the total roofline seconds
// per function, to compare with the measured step (bench/README.md).
//
// --tiny: 1 layer, d_model 32, 2 heads, T 8, B 1, vocab 16, 1 step, 1
// warm-up (for the CUDA-on-CPU simulator, KILN_CUDA_SIM=1: still minutes
// there, mostly NVRTC compiling every eager kernel once; no ctest for that
// reason).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/codegen/PerfModel.h"
#include "kiln/kiln.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "models/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace F = kiln::nn::functional;
const kiln::Device kCuda0{kiln::DeviceType::CUDA, 0};
constexpr double kPeakBf16 = 990e12, kPeakBytes = 4.8e12;

struct Config {
  int64_t layers = 12, d_model = 768, heads = 12, context = 1024, batch = 16, vocab = 50304;
  int steps = 20, warmup = 3;
  std::string modes = "eager,compiled,graphs,budget05";
  bool autocast = true, kernels = false, tiny = false, keep_cache = false, perf_report = false;
  std::string out;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// GPT + cross-entropy: one compiled graph (as tests/frontend/cuda_compile_test.cpp).
class WithLoss : public kiln::nn::Module {
public:
  explicit WithLoss(std::shared_ptr<kiln::nn::Module> m) : model_(register_module("model", std::move(m))) {}
  std::vector<kiln::Tensor> forward(const std::vector<kiln::Tensor> &in) override {
    kiln::Tensor logits = model_->forward(in[0]);
    return {F::cross_entropy(logits.reshape({-1, logits.size(-1)}), in[1])};
  }
  kiln::Tensor forward(const kiln::Tensor &) override { throw kiln::Error("WithLoss takes (x, y)"); }
  std::string name() const override { return "WithLoss"; }

private:
  std::shared_ptr<kiln::nn::Module> model_;
};

struct Batch {
  kiln::Tensor x, y;
};

Batch make_batch(const Config &c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int64_t> tok(0, c.vocab - 1);
  std::vector<int64_t> x(static_cast<size_t>(c.batch * c.context)), y(x.size());
  for (auto &v : x) v = tok(gen);
  for (auto &v : y) v = tok(gen);
  return {kiln::tensor(x, {c.batch, c.context}).to(kCuda0), kiln::tensor(y, {c.batch * c.context}).to(kCuda0)};
}

/// kiln::kernel_perf's records as JSON, with the total roofline per function.
json perf_report_json(const std::vector<kiln::codegen::perf::KernelPerf> &records) {
  json launches = json::array();
  double forward = 0, backward = 0;
  for (const auto &k : records) {
    (k.function == "forward" ? forward : backward) += k.roofline_seconds;
    json r{{"name", k.name}, {"function", k.function}, {"kind", k.kind}, {"bytes_read", k.bytes_read},
           {"bytes_written", k.bytes_written}, {"flops", k.flops}, {"rate", kiln::codegen::perf::rateName(k.rate)},
           {"block_threads", k.block_threads}, {"grid_blocks", k.grid_blocks},
           {"arithmetic_intensity", k.arithmetic_intensity}, {"roofline_s", k.roofline_seconds},
           {"bound", k.compute_bound ? "compute" : "memory"}};
    if (k.has_ptxas) {
      r["registers"] = k.registers;
      r["spill_bytes"] = k.spill_bytes;
      r["shared_bytes"] = k.shared_bytes;
      r["occupancy"] = k.occupancy.fraction;
      r["blocks_per_sm"] = k.occupancy.blocks_per_sm;
      r["occupancy_limit"] = kiln::codegen::perf::limitName(k.occupancy.limit);
    } else {
      r["ptxas"] = k.ptxas_note;
    }
    launches.push_back(r);
  }
  return {{"model", "H200 sm_90 roofline: max(bytes / 4.8e12, FLOPs / peak); kiln/codegen/PerfModel.h"},
          {"launches", launches}, {"forward_roofline_s", forward}, {"backward_roofline_s", backward},
          {"step_roofline_s", forward + backward}};
}

json run_mode(const Config &c, const std::string &mode, double flops_per_step) {
  json j{{"mode", mode}};
  kiln::manual_seed(0);
  auto gpt = std::make_shared<kiln::models::GPT>(c.vocab, c.context, c.layers, c.d_model, c.heads, 0.0);
  gpt->to(kCuda0);
  auto with_loss = std::make_shared<WithLoss>(gpt);
  const bool eager = mode == "eager";
  kiln::CompileOptions options;
  if (c.autocast) options.autocast = kiln::kBFloat16;
  if (mode == "budget05") options.memory_budget = 0.5;
  options.cuda_graphs = mode != "compiled";
  j["memory_budget"] = eager ? 1.0 : options.memory_budget;
  j["dtype"] = c.autocast ? "bf16 autocast" : "float32";
  std::shared_ptr<kiln::CompiledModule> compiled;
  if (!eager) compiled = kiln::compile(with_loss, options);
  kiln::optim::AdamW opt(gpt->parameters(), kiln::optim::AdamWOptions(3e-4).weight_decay(0.1));
  const Batch b = make_batch(c, 1);
  double first_loss = 0, last_loss = 0;
  auto step = [&] {
    opt.zero_grad();
    kiln::Tensor loss;
    if (eager) {
      std::optional<kiln::AutocastGuard> guard;
      if (c.autocast) guard.emplace(kiln::kBFloat16);
      loss = with_loss->forward(std::vector<kiln::Tensor>{b.x, b.y})[0];
    } else {
      loss = compiled->forward(std::vector<kiln::Tensor>{b.x, b.y})[0];
    }
    loss.backward();
    opt.step();
    return loss;
  };
  const auto t0 = Clock::now();
  first_loss = step().item();  // includes the compile
  kiln::cuda::synchronize();
  j["first_step_s"] = seconds_since(t0);
  if (compiled) {
    j["cold_compile_s"] = compiled->stats().last_compile_seconds;
    j["fused_kernels"] = compiled->stats().num_fusions;
    j["graph_breaks"] = compiled->graph_breaks().size();
    j["planned_peak_activation_bytes"] = compiled->stats().peak_activation_bytes();
    if (c.perf_report) {
      j["perf_report"] = perf_report_json(compiled->kernel_perf(std::vector<kiln::Tensor>{b.x, b.y}));
      std::printf("  static model: %zu launches, roofline forward %.3e s + backward %.3e s\n",
                  j["perf_report"]["launches"].size(), j["perf_report"]["forward_roofline_s"].get<double>(),
                  j["perf_report"]["backward_roofline_s"].get<double>());
    }
  }
  for (int i = 1; i < c.warmup; ++i) (void)step();
  kiln::cuda::synchronize();
  kiln::cuda::reset_peak_memory_stats(0);
  std::vector<double> times;
  kiln::Tensor loss;
  for (int i = 0; i < c.steps; ++i) {
    const auto t = Clock::now();
    loss = step();
    kiln::cuda::synchronize();
    times.push_back(seconds_since(t));
  }
  last_loss = loss.item();
  const double s = median(times);
  const double tokens = static_cast<double>(c.batch * c.context);
  j["ms_per_step"] = s * 1e3;
  j["ms_min"] = *std::min_element(times.begin(), times.end()) * 1e3;
  j["ms_max"] = *std::max_element(times.begin(), times.end()) * 1e3;
  j["tokens_per_s"] = tokens / s;
  j["TFLOPs"] = flops_per_step / s / 1e12;
  j["mfu"] = flops_per_step / s / kPeakBf16;
  j["peak_memory_bytes"] = kiln::cuda::max_memory_allocated(0);
  j["loss_first"] = first_loss;
  j["loss_last"] = last_loss;
  if (compiled) {
    const kiln::CompileStats &st = compiled->stats();
    j["cuda_graph_captures"] = st.cuda_graph_captures;
    j["cuda_graph_replays"] = st.cuda_graph_replays;
    j["cuda_graph_fallbacks"] = st.cuda_graph_fallbacks;
    j["cuda_graph_pool_bytes"] = st.cuda_graph_pool_bytes;
    // Warm compile: the same model and options again (the kernel cache is warm).
    auto again = kiln::compile(with_loss, options);
    kiln::Tensor l = again->forward(std::vector<kiln::Tensor>{b.x, b.y})[0];
    l.backward();
    kiln::cuda::synchronize();
    j["warm_compile_s"] = again->stats().last_compile_seconds;
  }
  return j;
}

/// Median seconds of `reps` synchronized calls after 3 warm-ups.
double time_it(const std::function<void()> &f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  kiln::cuda::synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto s = Clock::now();
    f();
    kiln::cuda::synchronize();
    t.push_back(seconds_since(s));
  }
  return median(t);
}

/// A forward-only module from a function of its inputs (compiled under no_grad).
class Fn : public kiln::nn::Module {
public:
  explicit Fn(std::function<kiln::Tensor(const std::vector<kiln::Tensor> &)> f) : f_(std::move(f)) {}
  std::vector<kiln::Tensor> forward(const std::vector<kiln::Tensor> &in) override { return {f_(in)}; }
  kiln::Tensor forward(const kiln::Tensor &x) override { return f_({x}); }
  std::string name() const override { return "Fn"; }

private:
  std::function<kiln::Tensor(const std::vector<kiln::Tensor> &)> f_;
};

json kernels(const Config &c) {
  kiln::NoGradGuard no_grad;
  kiln::manual_seed(0);
  const int reps = c.tiny ? 3 : 50;
  const int64_t rows = c.batch * c.context, D = c.d_model;
  json cases = json::array();
  auto bw_case = [&](const std::string &name, double bytes, double s) {
    cases.push_back({{"name", name}, {"kind", "bandwidth"}, {"ms", s * 1e3}, {"bytes", bytes},
                     {"GBps", bytes / s / 1e9}, {"of_4.8TBps", bytes / s / kPeakBytes}});
    std::printf("  %-34s %9.4f ms %9.1f GB/s\n", name.c_str(), s * 1e3, bytes / s / 1e9);
    std::fflush(stdout);
  };
  auto compiled_case = [&](const std::string &name, double bytes, std::vector<kiln::Tensor> in,
                           std::function<kiln::Tensor(const std::vector<kiln::Tensor> &)> f) {
    auto m = kiln::compile(std::make_shared<Fn>(std::move(f)));
    try {
      bw_case(name, bytes, time_it([&] { (void)m->forward(in); }, reps));
      cases.back()["fused_kernels"] = m->stats().num_fusions;
    } catch (const std::exception &e) {
      cases.push_back({{"name", name}, {"error", e.what()}});
    }
  };
  const kiln::Tensor x = kiln::randn({rows, D}).to(kCuda0), r = kiln::randn({rows, D}).to(kCuda0);
  const kiln::Tensor w = kiln::randn({D}).to(kCuda0), bias = kiln::randn({D}).to(kCuda0);
  const double f4 = 4.0, xb = static_cast<double>(rows * D) * f4;
  // The copy: the bandwidth ceiling of this run (a tensor of the largest row case's size, 2 x 1 GiB at most).
  const int64_t big = std::min<int64_t>(int64_t{1} << 28, std::max<int64_t>(rows * D * 4, c.tiny ? 4096 : (1 << 26)));
  const kiln::Tensor cx = kiln::randn({big}).to(kCuda0);
  bw_case("copy_f32", 2.0 * big * f4, time_it([&] { (void)cx.clone(); }, reps));
  compiled_case("layer_norm_f32", 2 * xb, {x, w, bias},
                [D](const std::vector<kiln::Tensor> &in) { return F::layer_norm(in[0], {D}, in[1], in[2], 1e-5); });
  compiled_case("add_layer_norm_f32", 3 * xb, {x, r, w, bias}, [D](const std::vector<kiln::Tensor> &in) {
    return F::layer_norm(in[0] + in[1], {D}, in[2], in[3], 1e-5);
  });
  compiled_case("gelu_tanh_f32", 2 * xb * 4, {kiln::randn({rows, 4 * D}).to(kCuda0)},
                [](const std::vector<kiln::Tensor> &in) { return kiln::gelu(in[0], "tanh"); });
  const int64_t H = c.heads, T = c.context;
  const int64_t sb = std::max<int64_t>(1, std::min<int64_t>(c.batch, 4));  // 4 x H x T x T f32: 200 MB at T 1024
  compiled_case("softmax_f32_TxT", 2.0 * sb * H * T * T * f4, {kiln::randn({sb, H, T, T}).to(kCuda0)},
                [](const std::vector<kiln::Tensor> &in) { return F::softmax(in[0], -1); });
  // GEMMs in bf16 at the step's shapes: compiled with the epilogue vs eager matmul alone.
  auto gemm_case = [&](const std::string &name, int64_t m, int64_t k, int64_t n, bool gelu, bool has_bias) {
    const kiln::Tensor a = kiln::randn({m, k}).to(kiln::kBFloat16).to(kCuda0);
    const kiln::Tensor wt = (kiln::randn({n, k}) * 0.02).to(kiln::kBFloat16).to(kCuda0);  // Linear's [out, in]
    const kiln::Tensor bb = kiln::randn({n}).to(kiln::kBFloat16).to(kCuda0);
    const double flops = 2.0 * m * n * k;
    const kiln::Tensor wtt = wt.t().contiguous();
    const double plain = time_it([&] { (void)kiln::matmul(a, wtt); }, reps);
    json row{{"name", name}, {"kind", "gemm"}, {"m", m}, {"k", k}, {"n", n},
             {"cublas_ms", plain * 1e3}, {"cublas_TFLOPs", flops / plain / 1e12}};
    try {
      auto mod = kiln::compile(std::make_shared<Fn>([gelu, has_bias](const std::vector<kiln::Tensor> &in) {
        kiln::Tensor y = has_bias ? F::linear(in[0], in[1], in[2]) : F::linear(in[0], in[1]);
        return gelu ? kiln::gelu(y, "tanh") : y;
      }));
      std::vector<kiln::Tensor> in{a, wt};
      if (has_bias) in.push_back(bb);
      const double s = time_it([&] { (void)mod->forward(in); }, reps);
      row["kiln_ms"] = s * 1e3;
      row["kiln_TFLOPs"] = flops / s / 1e12;
      row["of_cublas"] = plain / s;
      row["of_990TFLOPs"] = flops / s / kPeakBf16;
    } catch (const std::exception &e) {
      row["error"] = e.what();
    }
    std::printf("  %-34s cublas %8.2f TFLOP/s  kiln %8.2f TFLOP/s\n", name.c_str(),
                row["cublas_TFLOPs"].get<double>(), row.value("kiln_TFLOPs", 0.0));
    std::fflush(stdout);
    cases.push_back(row);
  };
  gemm_case("gemm_bf16_fc_bias_gelu", rows, D, 4 * D, true, true);
  gemm_case("gemm_bf16_proj_bias", rows, 4 * D, D, false, true);
  gemm_case("gemm_bf16_lm_head", rows, D, c.vocab, false, false);
  return cases;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: kiln-bench-gpt-cuda [--layers L] [--d-model D] [--heads H] [--context T] [--batch B]\n"
               "         [--vocab V] [--steps N] [--warmup W] [--modes eager,compiled,graphs,budget05]\n"
               "         [--autocast bf16|off] [--kernels] [--perf-report] [--tiny] [--keep-cache] [--out gpt.json]\n");
  std::exit(2);
}

} // namespace

int main(int argc, char **argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--layers") c.layers = std::stoll(next());
    else if (a == "--d-model") c.d_model = std::stoll(next());
    else if (a == "--heads") c.heads = std::stoll(next());
    else if (a == "--context") c.context = std::stoll(next());
    else if (a == "--batch") c.batch = std::stoll(next());
    else if (a == "--vocab") c.vocab = std::stoll(next());
    else if (a == "--steps") c.steps = std::stoi(next());
    else if (a == "--warmup") c.warmup = std::stoi(next());
    else if (a == "--modes") c.modes = next();
    else if (a == "--autocast") {
      const std::string v = next();
      if (v != "bf16" && v != "off") usage();
      c.autocast = v == "bf16";
    } else if (a == "--kernels") c.kernels = true;
    else if (a == "--perf-report") c.perf_report = true;
    else if (a == "--keep-cache") c.keep_cache = true;
    else if (a == "--tiny") {
      c.tiny = true;
      c.layers = 1, c.d_model = 32, c.heads = 2, c.context = 8, c.batch = 1, c.vocab = 16, c.steps = 1, c.warmup = 1;
    } else if (a == "--out") c.out = next();
    else usage();
  }
  if (c.steps < 1 || c.warmup < 1 || c.d_model % c.heads) usage();
  if (!c.keep_cache) {  // cold compiles: a fresh kernel cache
    const auto dir = std::filesystem::temp_directory_path() /
                     ("kiln-bench-gpt-cache-" + std::to_string(static_cast<long long>(std::time(nullptr))));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    ::setenv("KILN_CACHE_DIR", dir.c_str(), 1);
  }
  json j;
  int rc = 0;
  // Written after every mode, so a step killed by its timeout keeps what finished.
  auto write = [&] {
    if (!c.out.empty()) std::ofstream(c.out) << j.dump(2) << "\n";
  };
  try {
    auto *api = kiln::runtime::cuda::device_api(0);
    j["date"] = utc_now();
    j["device"] = api ? api->properties().name : "unknown";
    j["library"] = "kiln";
    j["simulator"] = std::getenv("KILN_CUDA_SIM") != nullptr;
    const double N = static_cast<double>(12 * c.layers * c.d_model * c.d_model + 13 * c.layers * c.d_model +
                                         2 * c.d_model + c.vocab * c.d_model);  // blocks, ln_f, lm_head
    const double tokens = static_cast<double>(c.batch * c.context);
    const double flops = (6 * N + 12.0 * c.layers * c.d_model * c.context) * tokens;
    j["config"] = {{"layers", c.layers}, {"d_model", c.d_model}, {"heads", c.heads}, {"context", c.context},
                   {"batch", c.batch}, {"vocab", c.vocab}, {"steps", c.steps}, {"warmup", c.warmup},
                   {"autocast", c.autocast ? "bf16" : "off"}, {"optimizer", "AdamW"}};
    j["params_non_embedding"] = N;
    j["flops_per_step"] = flops;
    j["peak_flops"] = kPeakBf16;
    std::stringstream ms(c.modes);
    for (std::string mode; std::getline(ms, mode, ',');) {
      if (mode != "eager" && mode != "compiled" && mode != "graphs" && mode != "budget05") usage();
      std::printf("== %s\n", mode.c_str());
      std::fflush(stdout);
      json r;
      try {
        r = run_mode(c, mode, flops);
      } catch (const std::exception &e) {
        r = {{"mode", mode}, {"error", e.what()}};
        rc = 1;
      }
      if (r.contains("ms_per_step"))
        std::printf("  %.3f ms/step, %.0f tokens/s, MFU %.3f, peak %.1f MB\n", r["ms_per_step"].get<double>(),
                    r["tokens_per_s"].get<double>(), r["mfu"].get<double>(),
                    r["peak_memory_bytes"].get<double>() / 1e6);
      else
        std::printf("  error: %s\n", r.value("error", std::string("?")).c_str());
      std::fflush(stdout);
      j["modes"][mode] = r;
      write();
    }
    if (c.kernels) {
      std::printf("== kernels\n");
      j["kernels"] = kernels(c);
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-bench-gpt-cuda: %s\n", e.what());
    j["error"] = e.what();
    rc = 1;
  }
  if (!c.out.empty()) write();
  else std::printf("%s\n", j.dump(2).c_str());
  return rc;
}
