// GraphTestUtils.h - helpers shared by the codegen tests: build ir::Graphs
// node by node, make and read TensorViews, compile and run with EXPECTs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "CheckingBackend.h"
#include "kiln/codegen/Compiler.h"
#include "kiln/codegen/Target.h"
#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/LaunchExecutable.h"

namespace kiln::codegen_test {

using kiln::ir::ElementType;
using kiln::ir::OpKind;
using runtime::TensorView;

using Shape = std::vector<int64_t>;

/// Builds an ir::Graph node by node.
struct GraphMaker {
  ir::Graph g;

  int input(Shape shape, ElementType type = ElementType::F32, ir::InputRole role = ir::InputRole::Primal) {
    int v = g.addValue(std::move(shape), type);
    g.inputs.push_back(v);
    g.input_roles.push_back(role);
    return v;
  }
  int input(Shape shape, ir::InputRole role) { return input(std::move(shape), ElementType::F32, role); }
  int node(OpKind kind, std::vector<int> operands, Shape shape, ElementType type = ElementType::F32,
           std::function<void(ir::Node &)> setup = nullptr) {
    ir::Node n;
    n.kind = kind;
    n.operands = std::move(operands);
    n.result = g.addValue(std::move(shape), type);
    if (setup)
      setup(n);
    g.nodes.push_back(n);
    return n.result;
  }
  /// Same shape and type as operand 0.
  int same(OpKind kind, std::vector<int> operands) {
    const ir::Value &v = g.values[operands[0]];
    return node(kind, std::move(operands), v.shape, v.type);
  }
  /// A float32 reduction of `v` over `dims` with result `shape`.
  int reduce(OpKind kind, int v, std::vector<int64_t> dims, Shape shape, bool keepdim = false) {
    return node(kind, {v}, std::move(shape), ElementType::F32, [&](ir::Node &n) {
      n.ints = dims;
      n.keepdim = keepdim;
    });
  }
  /// A float32 splat constant.
  int constant(Shape shape, double value) {
    return node(OpKind::Constant, {}, std::move(shape), ElementType::F32, [&](ir::Node &n) { n.scalar = value; });
  }
  ir::Graph done(std::vector<int> outputs, int num_forward_outputs = -1) {
    g.outputs = outputs;
    g.num_forward_outputs = num_forward_outputs < 0 ? static_cast<int>(outputs.size()) : num_forward_outputs;
    return g;
  }
};

inline int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}


/// Deterministic test values in [-2, 2), none exactly zero.
inline std::vector<float> values(int64_t n, int seed) {
  std::vector<float> v(n);
  uint32_t s = 12345u + 977u * static_cast<uint32_t>(seed);
  for (auto &x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>((s >> 8) % 4000) / 1000.0f - 2.0f + 0.0005f;
  }
  return v;
}

/// The device the conformance suites compile for: their test parameter
/// (ConformanceTest sets it).
inline Device &conformanceDevice() {
  static Device device = kCPU;
  return device;
}

/// Base of the conformance suites (IREE's CTS pattern): each TEST_P runs
/// once per device type the file instantiates, e.g.
///   INSTANTIATE_TEST_SUITE_P(cpu, codegen_Compile, ::testing::Values(DeviceType::CPU), deviceName);
/// A new backend (a registered codegen::Target) adds one such line.
/// The second conformance device: tests/support's checking PrivateUse1
/// device (poisoned host memory, launches checked to be on it) with the CPU
/// compile target registered for it, installed once per process.
inline void installCheckingDevice() {
  static bool installed = [] {
    kiln::testing::install_checking_backend();
    codegen::register_target(DeviceType::PrivateUse1, codegen::cpuTarget());
    return true;
  }();
  (void)installed;
}

class ConformanceTest : public ::testing::TestWithParam<DeviceType> {
protected:
  void SetUp() override {
    if (GetParam() == DeviceType::PrivateUse1)
      installCheckingDevice();
    conformanceDevice() = Device(GetParam(), 0);
  }
  void TearDown() override { conformanceDevice() = kCPU; }
};

inline std::string deviceName(const ::testing::TestParamInfo<DeviceType> &info) {
  return device_type_name(info.param);
}

/// Default compile options for the conformance device.
/// Elements of a view in row-major order (any strides), as T. The view's
/// buffer is first copied to the host through its device's backend.
template <class T> std::vector<T> read(const TensorView &v) {
  std::vector<char> host(v.buffer->nbytes());
  runtime::find_backend(v.buffer->device().type)->copy(host.data(), kCPU, v.buffer->data(), v.buffer->device(), host.size());
  const T *data = reinterpret_cast<const T *>(host.data());
  std::vector<T> out;
  const int64_t n = v.numel();
  const size_t rank = v.sizes.size();
  std::vector<int64_t> index(rank, 0);
  for (int64_t k = 0; k < n; ++k) {
    int64_t off = v.offset;
    for (size_t d = 0; d < rank; ++d)
      off += index[d] * v.strides[d];
    out.push_back(data[off]);
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0; --d) {
      if (++index[d] < v.sizes[d])
        break;
      index[d] = 0;
    }
  }
  return out;
}

/// A contiguous tensor of `values` on the conformance device (copied there
/// through its backend).
template <class T> TensorView tensor(Shape shape, const std::vector<T> &values, DType dtype) {
  const Device device = conformanceDevice();
  runtime::DeviceBackend *backend = runtime::find_backend(device.type);
  TensorView v;
  v.buffer = runtime::Buffer::make(std::max<size_t>(values.size() * sizeof(T), 1), backend->allocator(device.index));
  backend->copy(v.buffer->data(), device, values.data(), kCPU, values.size() * sizeof(T));
  v.sizes = std::move(shape);
  v.strides = runtime::contiguous_strides(v.sizes);
  v.dtype = dtype;
  return v;
}
inline TensorView f32(Shape shape, const std::vector<float> &values) { return tensor(std::move(shape), values, kFloat32); }

inline codegen::CompileOptions conformanceOptions() {
  codegen::CompileOptions options;
  options.device = conformanceDevice();
  return options;
}

inline codegen::CompiledGraph compileOk(const ir::Graph &graph) {
  codegen::CompiledGraph compiled;
  std::string error;
  codegen::CompileOptions options;
  options.device = conformanceDevice();
  if (const char *dir = std::getenv("KILN_DUMP_IR"))
    options.dump_ir_dir = dir; // for debugging
  bool ok = codegen::compileGraph(graph, options, &compiled, &error);
  EXPECT_TRUE(ok) << error;
  return compiled;
}

inline std::vector<TensorView> runOk(const runtime::Executable &exe, const std::vector<TensorView> &in) {
  std::string error;
  auto out = exe.run(in, &error);
  EXPECT_TRUE(error.empty()) << error;
  return out;
}

inline void expectNear(const std::vector<float> &got, const std::vector<float> &want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0f, std::fabs(want[i]))) << "element " << i;
}

/// Runs this test binary again in a child process with `--gtest_filter=`
/// `filter` and the environment variables `env` set, and returns the child's
/// exit status (0: its tests passed), or -1 if it could not be started or did
/// not exit normally.
inline int runThisTestInChild(const std::string &filter, const std::vector<std::pair<std::string, std::string>> &env) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0)
    return -1;
  exe[n] = '\0';
  std::string arg = "--gtest_filter=" + filter;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    for (const auto &[name, value] : env)
      setenv(name.c_str(), value.c_str(), 1);
    char *argv[] = {exe, arg.data(), nullptr};
    execv(exe, argv);
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

}  // namespace kiln::codegen_test
