// The static performance report of compiled CUDA graphs
// (kiln/codegen/PerfReport.h; kiln::explain's "performance" section,
// kiln::kernel_perf) on the CUDA-on-CPU simulator: bytes and FLOPs of a
// pointwise add and a GEMM in closed form, and the compiled MLP's report with
// ptxas' registers (NVRTC sm_90) and no spills.
#include <cstdio>
#include <cstdlib>
#include <regex>

#include <gtest/gtest.h>

#include "kiln/codegen/PerfModel.h"
#include "kiln/kiln.h"
#include "kiln/runtime/cuda/Nvrtc.h"
#include "models/gpt.h"

namespace kiln {
namespace {

const Device kCuda0{DeviceType::CUDA, 0};

class CudaPerfReport : public ::testing::Test {
protected:
  void SetUp() override {
    if (!std::getenv("KILN_TEST_REAL_CUDA")) ::setenv("KILN_CUDA_SIM", "1", 1);
  }
};

/// x + b for a buffer b of x's shape.
class AddBuffer : public nn::Module {
public:
  explicit AddBuffer(int64_t n) { register_buffer("b", randn({n})); }
  Tensor forward(const Tensor &x) override { return x + buffers()[0]; }
  std::string name() const override { return "AddBuffer"; }
};

/// x @ w for a parameter w [K, N].
class MatmulOnly : public nn::Module {
public:
  MatmulOnly(int64_t k, int64_t n) { register_parameter("w", randn({k, n})); }
  Tensor forward(const Tensor &x) override { return matmul(x, parameters()[0]); }
  std::string name() const override { return "MatmulOnly"; }
};

// One pointwise kernel: reads 2 x 4N bytes, writes 4N, N FLOPs, memory-bound
// at 12N / 4.8e12 s; explain prints that line and the forward's total.
TEST_F(CudaPerfReport, PointwiseAddIsTwelveBytesAndOneFlopPerElement) {
  const int64_t n = 4096;
  auto model = std::make_shared<AddBuffer>(n);
  model->to(kCuda0);
  model->eval();
  autograd::NoGradGuard no_grad;
  auto compiled = compile(model);
  const Tensor x = randn({n}).to(kCuda0);
  const std::vector<codegen::perf::KernelPerf> records = kernel_perf(*compiled, x);
  ASSERT_EQ(records.size(), 1u);
  const codegen::perf::KernelPerf &k = records[0];
  EXPECT_EQ(k.function, "forward");
  EXPECT_EQ(k.kind, "pointwise");
  EXPECT_EQ(k.bytes_read, 8 * n);
  EXPECT_EQ(k.bytes_written, 4 * n);
  EXPECT_EQ(k.flops, n);
  EXPECT_EQ(k.block_threads, 256);
  EXPECT_FALSE(k.compute_bound);
  EXPECT_DOUBLE_EQ(k.roofline_seconds, 12.0 * n / 4.8e12);
  const std::string report = explain(*compiled, x, /*print=*/false);
  const std::string seconds = codegen::perf::formatSeconds(12.0 * n / 4.8e12);
  EXPECT_NE(report.find("reads 32768 B, writes 16384 B, 4096 FLOPs (fp32), AI 0.0833 FLOP/B, memory-bound, roofline " +
                        seconds + " s"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("forward: 1 launches, 49152 B, 4096 FLOPs, total roofline " + seconds + " s"),
            std::string::npos)
      << report;
  std::printf("[perf-report] %s", report.c_str());
}

// One GEMM launch [M, K] x [K, N]: 2MNK FLOPs, compute-bound at the fp32
// peak (TF32 off), no ptxas (cuBLASLt's kernel).
TEST_F(CudaPerfReport, MatmulIsTwoMnkFlops) {
  const int64_t m = 64, k = 128, n = 96;
  auto model = std::make_shared<MatmulOnly>(k, n);
  model->to(kCuda0);
  autograd::NoGradGuard no_grad;
  auto compiled = compile(model);
  const std::vector<codegen::perf::KernelPerf> records = kernel_perf(*compiled, randn({m, k}).to(kCuda0));
  ASSERT_EQ(records.size(), 1u);
  const codegen::perf::KernelPerf &g = records[0];
  EXPECT_EQ(g.kind, "gemm");
  EXPECT_EQ(g.name, "gemm 64x96x128");
  EXPECT_EQ(g.flops, 2 * m * n * k);
  EXPECT_EQ(g.bytes_read, 4 * (m * k + k * n));
  EXPECT_EQ(g.bytes_written, 4 * m * n);
  EXPECT_EQ(g.rate, codegen::perf::FlopRate::Fp32);
  EXPECT_FALSE(g.has_ptxas);
  EXPECT_DOUBLE_EQ(g.roofline_seconds, std::max(4.0 * (m * k + k * n + m * n) / 4.8e12, 2.0 * m * n * k / 66.9e12));
}

// The compiled training MLP (64-128-10, ReLU): forward and backward
// launches; every generated kernel has ptxas' registers (NVRTC sm_90, also
// on the simulator) and 0 spills; the GEMMs say why they have none.
TEST_F(CudaPerfReport, MlpExplainHasRegistersFromPtxasAndNoSpills) {
  manual_seed(10);
  auto mlp = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(64, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
  mlp->to(kCuda0);
  auto compiled = compile(mlp);
  const Tensor x = rand({4, 64}).to(kCuda0);
  const std::string report = explain(*compiled, x, /*print=*/false);
  std::printf("[perf-report] %s", report.c_str());
  EXPECT_NE(report.find("performance (static model, H200 sm_90"), std::string::npos) << report;
  EXPECT_NE(report.find("  forward: "), std::string::npos) << report;
  EXPECT_NE(report.find("  backward: "), std::string::npos) << report;
  EXPECT_NE(report.find("ptxas: n/a (library kernel"), std::string::npos) << report; // the GEMMs
  const std::vector<codegen::perf::KernelPerf> records = compiled->kernel_perf(x);
  int kernels = 0, gemms = 0;
  for (const codegen::perf::KernelPerf &k : records) {
    EXPECT_GT(k.roofline_seconds, 0) << k.name;
    if (k.kind == "gemm") {
      ++gemms;
      continue;
    }
    ++kernels;
    EXPECT_GT(k.block_threads, 0) << k.name;
    if (!runtime::cuda::nvrtc_available()) {
      EXPECT_NE(k.ptxas_note.find("n/a (NVRTC not loadable"), std::string::npos) << k.ptxas_note;
      continue;
    }
    EXPECT_TRUE(k.has_ptxas) << k.name << ": " << k.ptxas_note;
    EXPECT_GT(k.registers, 0) << k.name;
    EXPECT_EQ(k.spill_bytes, 0) << k.name;
    EXPECT_GT(k.occupancy.blocks_per_sm, 0) << k.name;
    EXPECT_NE(report.find(std::to_string(k.registers) + " registers, 0 spill bytes"), std::string::npos) << report;
  }
  EXPECT_GT(kernels, 0);
  EXPECT_GE(gemms, 3); // forward 2, backward at least the weight gradients
}

/// The integer after `prefix` in `text` (-1 when absent).
int64_t number_after(const std::string &text, const std::string &pattern) {
  std::smatch m;
  return std::regex_search(text, m, std::regex(pattern + "([0-9]+)")) ? std::stoll(m[1]) : -1;
}

// The compiled training GPT (1 block, d_model 16): the report covers every
// launch of the memory plan, forward and backward, and no kernel spills.
TEST_F(CudaPerfReport, GptReportCoversEveryLaunch) {
  manual_seed(12);
  auto gpt = std::make_shared<models::GPT>(/*vocab=*/11, /*context=*/8, /*layers=*/1, /*d_model=*/16, /*heads=*/2,
                                           /*dropout=*/0.0);
  gpt->to(kCuda0);
  auto compiled = compile(gpt);
  const Tensor x = clamp(floor(rand({2, 8}) * 11.0), 0.0, 10.0).to(kInt64).to(kCuda0);
  const std::string report = explain(*compiled, x, /*print=*/false);
  std::printf("[perf-report] %s", report.c_str());
  const int64_t forward = number_after(report, "memory plan: forward arena [0-9]+ bytes, ");
  const int64_t backward = number_after(report, "backward arena [0-9]+ bytes[^,]*, ");
  ASSERT_GT(forward, 0) << report;
  ASSERT_GT(backward, 0) << report;
  EXPECT_EQ(number_after(report, "  forward: "), forward) << report;
  EXPECT_EQ(number_after(report, "  backward: "), backward) << report;
  int64_t spills = 0, with_ptxas = 0;
  for (const codegen::perf::KernelPerf &k : compiled->kernel_perf(x)) {
    spills += k.spill_bytes;
    with_ptxas += k.has_ptxas;
  }
  EXPECT_EQ(spills, 0);
  if (runtime::cuda::nvrtc_available()) EXPECT_GT(with_ptxas, 0);
}

} // namespace
} // namespace kiln
