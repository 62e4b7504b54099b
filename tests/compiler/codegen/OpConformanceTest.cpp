// The op-by-op conformance list (OpCases.h), compiled: each case's graph
// compiled for the device under test and compared with the eager ops that
// record it (compile_detail::replay_nodes, the graph-break replay).
// Instantiated per device: the cpu, tests/support's checking device and the
// CUDA target on the simulated CUDA device. A new backend adds one
// INSTANTIATE line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "GraphTestUtils.h"
#include "OpCases.h"
#include "compile/replay.h"
#include "kiln/codegen/CudaTarget.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using namespace kiln::codegen_test;
using ir::OpKind;

/// A compiled result as doubles (float32, float64 or bool outputs).
std::vector<double> as_doubles(const TensorView &v) {
  std::vector<double> out;
  switch (v.dtype) {
  case DType::Float32:
    for (float x : read<float>(v)) out.push_back(x);
    break;
  case DType::Float64:
    out = read<double>(v);
    break;
  case DType::Bool:
    for (uint8_t x : read<uint8_t>(v)) out.push_back(x);
    break;
  case DType::Int64:
    for (int64_t x : read<int64_t>(v)) out.push_back(static_cast<double>(x));
    break;
  default:
    ADD_FAILURE() << "unexpected result dtype " << dtype_name(v.dtype);
  }
  return out;
}

using Param = std::tuple<DeviceType, OpKind>;

class OpConformance : public ::testing::TestWithParam<Param> {
protected:
  void SetUp() override {
    if (std::get<0>(GetParam()) == DeviceType::PrivateUse1)
      installCheckingDevice();
    if (std::get<0>(GetParam()) == DeviceType::CUDA) {
      // The CUDA target on the simulator (a GPU under KILN_TEST_REAL_CUDA=1).
      if (!std::getenv("KILN_TEST_REAL_CUDA"))
        ::setenv("KILN_CUDA_SIM", "1", 1);
      codegen::registerCudaTarget();
    }
    conformanceDevice() = Device(std::get<0>(GetParam()), 0);
  }
  void TearDown() override { conformanceDevice() = kCPU; }
};

/// Compiled (on the device) vs eager (on the cpu): within a few float32
/// ulps (the CPU target's exp/log/tanh/sin/cos are polynomial
/// approximations, sums are reassociated).
TEST_P(OpConformance, CompiledMatchesEager) {
  const OpKind kind = std::get<1>(GetParam());
  auto it = cases().find(ir::toString(kind));
  ASSERT_NE(it, cases().end()) << "no conformance case for " << ir::toString(kind);
  for (CaseBuilder build : it->second) {
    OpCase c = build();
    std::vector<TensorView> args;
    std::vector<Tensor> eager(c.graph.values.size());
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const Shape &shape = c.graph.values[c.graph.inputs[i]].shape;
      args.push_back(f32(shape, c.inputs[i]));
      eager[c.graph.inputs[i]] = kiln::tensor(c.inputs[i], shape);
    }
    compile_detail::replay_nodes(c.graph, {}, {}, eager);
    codegen::CompiledGraph compiled = compileOk(c.graph);
    ASSERT_TRUE(compiled.forward);
    std::vector<TensorView> got = runOk(*compiled.forward, args);
    ASSERT_EQ(got.size(), c.graph.outputs.size());
    for (size_t r = 0; r < got.size(); ++r) {
      std::vector<double> g = as_doubles(got[r]), w = eager[c.graph.outputs[r]].to_vector<double>();
      ASSERT_EQ(g.size(), w.size()) << "output " << r;
      for (size_t i = 0; i < w.size(); ++i)
        EXPECT_NEAR(g[i], w[i], 4e-6 * (1.0 + std::abs(w[i]))) << ir::toString(kind) << " output " << r << " [" << i << "]";
    }
  }
}

std::string paramName(const ::testing::TestParamInfo<Param> &info) {
  if (std::get<0>(info.param) == DeviceType::CUDA)
    return std::string("cuda_sim_") + ir::toString(std::get<1>(info.param));
  return std::string(device_type_name(std::get<0>(info.param))) + "_" + ir::toString(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(cpu, OpConformance,
                         ::testing::Combine(::testing::Values(DeviceType::CPU), ::testing::ValuesIn(allOpKinds())),
                         paramName);
INSTANTIATE_TEST_SUITE_P(checking, OpConformance,
                         ::testing::Combine(::testing::Values(DeviceType::PrivateUse1),
                                            ::testing::ValuesIn(allOpKinds())),
                         paramName);

// The CUDA target (codegen/cuda/CudaTarget.cpp) on the simulated CUDA device.
INSTANTIATE_TEST_SUITE_P(cuda, OpConformance,
                         ::testing::Combine(::testing::Values(DeviceType::CUDA), ::testing::ValuesIn(allOpKinds())),
                         paramName);

TEST(OpConformanceList, EveryOpKindHasACase) {
  for (OpKind kind : allOpKinds())
    EXPECT_TRUE(cases().count(ir::toString(kind))) << "add a conformance case for " << ir::toString(kind);
  EXPECT_EQ(static_cast<int>(cases().size()), ir::kNumOpKinds);
}

} // namespace
} // namespace kiln
