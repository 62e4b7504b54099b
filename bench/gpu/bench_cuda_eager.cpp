// kiln-bench-cuda-eager: eager CUDA on one device, as JSON, for
// bench/gpu/run_checks.sh (which runs the same cases through PyTorch on the
// same GPU, bench/gpu/torch_peer.py, and reports each number as a ratio).
//
//   kiln-bench-cuda-eager [--small] [--out results.json]
//
// Cases (float32 unless named): the launch latency of a one-element add;
// a copy (x.clone(), the emitter's copy kernel: the bandwidth ceiling the
// pointwise goal is stated against); add, mul+add and exp over 2^26
// elements; softmax and layer_norm over 8192 x 4096 rows; cuBLASLt GEMMs
// (float32 4096^3, bfloat16 8192^3). Each time is the median of `reps`
// timed calls after 3 warm-up calls, each call followed by
// kiln::cuda::synchronize (so a time includes the launch). Bytes are what
// the op must move at least (inputs read once, output written once);
// GB/s = bytes / time. --small shrinks every size (for a smoke run on the
// CUDA-on-CPU simulator, KILN_CUDA_SIM=1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/runtime/cuda/CudaBackend.h"

namespace {

using Clock = std::chrono::steady_clock;
const kiln::Device kCuda0{kiln::DeviceType::CUDA, 0};

/// Median seconds of `reps` synchronized calls of `f` after 3 warm-ups.
double median_seconds(const std::function<void()> &f, int reps) {
  for (int i = 0; i < 3; ++i) f();
  kiln::cuda::synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    f();
    kiln::cuda::synchronize();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Case {
  std::string name;
  double seconds;
  double bytes;  ///< at least moved (0: not a bandwidth case)
  double flops;  ///< 0: not a compute case
};

nlohmann::json to_json(const Case &c) {
  nlohmann::json j{{"name", c.name}, {"ms", c.seconds * 1e3}};
  if (c.bytes > 0) j["GBps"] = c.bytes / c.seconds / 1e9, j["bytes"] = c.bytes;
  if (c.flops > 0) j["TFLOPs"] = c.flops / c.seconds / 1e12;
  return j;
}

} // namespace

int main(int argc, char **argv) {
  bool small = false;
  std::string out;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--small")) small = true;
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else {
      std::fprintf(stderr, "usage: kiln-bench-cuda-eager [--small] [--out results.json]\n");
      return 2;
    }
  }
  try {
    kiln::manual_seed(0);
    const int reps = small ? 3 : 20;
    const int64_t n = small ? (1 << 12) : (int64_t{1} << 26);
    const int64_t rows = small ? 16 : 8192, cols = small ? 256 : 4096;
    const int64_t g32 = small ? 64 : 4096, g16 = small ? 64 : 8192;
    std::vector<Case> cases;
    auto add_case = [&](const std::string &name, double bytes, double flops, const std::function<void()> &f) {
      cases.push_back({name, median_seconds(f, reps), bytes, flops});
      std::printf("%-28s %10.4f ms\n", name.c_str(), cases.back().seconds * 1e3);
      std::fflush(stdout);
    };

    const kiln::Tensor one = kiln::ones({1}).to(kCuda0);
    add_case("latency_add_1", 0, 0, [&] { (void)(one + one); });

    const kiln::Tensor x = kiln::rand({n}).to(kCuda0), y = kiln::rand({n}).to(kCuda0);
    const double fb = static_cast<double>(n) * 4;
    add_case("copy_f32", 2 * fb, 0, [&] { (void)x.clone(); });
    add_case("add_f32", 3 * fb, 0, [&] { (void)(x + y); });
    add_case("mul_add_f32", 3 * fb, 0, [&] { (void)(x * y + 1.0); });
    add_case("exp_f32", 2 * fb, 0, [&] { (void)kiln::exp(x); });

    const kiln::Tensor r = kiln::randn({rows, cols}).to(kCuda0);
    const kiln::Tensor w = kiln::ones({cols}).to(kCuda0), b = kiln::zeros({cols}).to(kCuda0);
    const double rb = static_cast<double>(rows * cols) * 4;
    add_case("softmax_f32", 2 * rb, 0, [&] { (void)kiln::nn::functional::softmax(r, 1); });
    add_case("layer_norm_f32", 2 * rb, 0, [&] { (void)kiln::nn::functional::layer_norm(r, {cols}, w, b, 1e-5); });

    const kiln::Tensor a32 = kiln::randn({g32, g32}).to(kCuda0), b32 = kiln::randn({g32, g32}).to(kCuda0);
    add_case("gemm_f32_" + std::to_string(g32), 0, 2.0 * g32 * g32 * g32, [&] { (void)kiln::matmul(a32, b32); });
    const kiln::Tensor a16 = kiln::randn({g16, g16}).to(kiln::kBFloat16).to(kCuda0);
    const kiln::Tensor b16 = kiln::randn({g16, g16}).to(kiln::kBFloat16).to(kCuda0);
    add_case("gemm_bf16_" + std::to_string(g16), 0, 2.0 * g16 * g16 * g16, [&] { (void)kiln::matmul(a16, b16); });

    nlohmann::json j;
    auto *api = kiln::runtime::cuda::device_api(0);
    j["device"] = api ? api->properties().name : "unknown";
    j["library"] = "kiln";
    j["small"] = small;
    for (const Case &c : cases) j["cases"].push_back(to_json(c));
    if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
    else std::printf("%s\n", j.dump(2).c_str());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kiln-bench-cuda-eager: %s\n", e.what());
    return 1;
  }
  return 0;
}
