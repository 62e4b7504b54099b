// The op-by-op conformance list (OpCases.h) on the simulated CUDA device
// (KILN_CUDA_SIM=1): every case's graph replayed with the eager ops that
// record it (compile_detail::replay_nodes) on CUDA tensors and on the cpu,
// in every dtype (float32, float64, float16, bfloat16, int64), forward and
// the gradient of sum(output * w) for fixed w with respect to every
// floating input. The cpu run is the trusted one; the rule is the fuzzer's
// (tests/fuzz/Oracle.h, fuzz::same: allclose, else the rmse against the
// float64 run of the same values within 2-3x the cpu's). A dtype the cpu
// rejects for an op must be rejected on CUDA too. Each test then compiles
// every CUDA kernel it generated with NVRTC for sm_90: a non-empty CUBIN
// and no register spills.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "GraphTestUtils.h"
#include "OpCases.h"
#include "Oracle.h"
#include "compile/replay.h"
#include "kiln/kiln.h"
#include "kiln/runtime/cuda/Nvrtc.h"
#include "../../support/NvrtcKernelCheck.h"


namespace kiln {
namespace {

using namespace kiln::codegen_test;
using ir::OpKind;

const Device kCuda0{DeviceType::CUDA, 0};

/// What one eager run of a case gives: its outputs and the gradients of
/// its inputs (undefined where an input gets none), all moved to the cpu,
/// or the error it raised.
struct EagerRun {
  std::vector<Tensor> outputs, grads;
  std::string error;
};

/// `c` replayed eagerly on `device` with its inputs rounded to `dtype` (the
/// float64 reference: those rounded values, then widened, so both runs see
/// the same numbers), then the backward of sum_k sum(output_k * w_k).
EagerRun run_eager(const OpCase &c, DType dtype, Device device, bool float64) {
  EagerRun r;
  try {
    std::vector<Tensor> vals(c.graph.values.size()), leaves;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      Tensor t = kiln::tensor(c.inputs[i], c.graph.values[c.graph.inputs[i]].shape).to(dtype);
      if (float64 && t.is_floating_point()) t = t.to(kFloat64);
      t = t.to(device);
      if (t.is_floating_point()) t.requires_grad_(true);
      leaves.push_back(t);
      vals[c.graph.inputs[i]] = t;
    }
    compile_detail::replay_nodes(c.graph, {}, {}, vals);
    Tensor loss;
    for (size_t k = 0; k < c.graph.outputs.size(); ++k) {
      const Tensor &out = vals[c.graph.outputs[k]];
      if (out.device() != device)
        throw Error("output " + std::to_string(k) + " is on " + out.device().str() + ", expected " + device.str());
      r.outputs.push_back(out.detach().cpu());
      if (!out.requires_grad()) continue;
      Tensor w = kiln::tensor(values(out.numel(), 100 + static_cast<int>(k)), out.sizes());
      if (is_floating_point(dtype)) w = w.to(dtype); // the cotangent's values, the same in both runs
      const Tensor term = (out * w.to(out.dtype()).to(device)).sum();
      loss = loss.defined() ? loss + term : term;
    }
    if (loss.defined()) loss.backward();
    for (const Tensor &leaf : leaves) r.grads.push_back(leaf.grad().defined() ? leaf.grad().cpu() : Tensor());
  } catch (const std::exception &e) { // kiln::Error, or a runtime kernel's refusal (replay calls internal primitives)
    r.error = e.what();
  }
  return r;
}

using Param = std::tuple<OpKind, DType>;

class CudaOpConformance : public ::testing::TestWithParam<Param> {
protected:
  // The simulator, unless the device script runs this on a GPU (KILN_TEST_REAL_CUDA=1).
  void SetUp() override {
    if (!std::getenv("KILN_TEST_REAL_CUDA")) ::setenv("KILN_CUDA_SIM", "1", 1);
  }
};

/// Every kernel this process generated compiles with NVRTC to a non-empty
/// sm_90 CUBIN without spills (the disk cache keeps each one's ptxas log).
void expect_kernels_compile_for_sm90() {
  if (!runtime::cuda::nvrtc_available()) {
    std::printf("NVRTC check skipped: %s\n", runtime::cuda::nvrtc_unavailable_reason().c_str());
    return;
  }
  test::expect_compile_for_sm90_without_spills(cuda_eager::emitted_kernels());
}

TEST_P(CudaOpConformance, EagerMatchesTheCpu) {
  const auto [kind, dtype] = GetParam();
  auto it = cases().find(ir::toString(kind));
  ASSERT_NE(it, cases().end()) << "no conformance case for " << ir::toString(kind);
  const bool sixteen = dtype == kFloat16 || dtype == kBFloat16;
  int case_index = 0;
  for (CaseBuilder build : it->second) {
    const OpCase c = build();
    const std::string where = std::string(ir::toString(kind)) + " case " + std::to_string(case_index++) + " in " +
                              dtype_name(dtype);
    const EagerRun cpu = run_eager(c, dtype, kCPU, false);
    const EagerRun dev = run_eager(c, dtype, kCuda0, false);
    if (!cpu.error.empty()) {
      EXPECT_FALSE(dev.error.empty()) << where << ": the cpu rejects it (" << cpu.error << ") but CUDA ran it";
      continue;
    }
    ASSERT_TRUE(dev.error.empty()) << where << ": " << dev.error;
    const EagerRun ref = is_floating_point(dtype) ? run_eager(c, dtype, kCPU, true) : cpu;
    ASSERT_TRUE(ref.error.empty()) << where << " (float64): " << ref.error;
    ASSERT_EQ(dev.outputs.size(), cpu.outputs.size());
    ASSERT_EQ(dev.grads.size(), cpu.grads.size());
    for (size_t k = 0; k < cpu.outputs.size(); ++k) {
      const std::string why = fuzz::same(dev.outputs[k], cpu.outputs[k], ref.outputs[k], sixteen);
      EXPECT_TRUE(why.empty()) << where << ", output " << k << ": " << why;
    }
    for (size_t i = 0; i < cpu.grads.size(); ++i) {
      const std::string why = fuzz::same(dev.grads[i], cpu.grads[i], ref.grads[i], sixteen);
      EXPECT_TRUE(why.empty()) << where << ", gradient of input " << i << ": " << why;
    }
  }
  expect_kernels_compile_for_sm90();
}

std::string paramName(const ::testing::TestParamInfo<Param> &info) {
  return std::string(ir::toString(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(cuda_sim, CudaOpConformance,
                         ::testing::Combine(::testing::ValuesIn(allOpKinds()),
                                            ::testing::Values(kFloat32, kFloat64, kFloat16, kBFloat16, kInt64)),
                         paramName);

} // namespace
} // namespace kiln
