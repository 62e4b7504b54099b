// A second device backend (the checking PrivateUse1 device of
// tests/support/CheckingBackend.h) runs a LaunchExecutable built for it:
// the same results as on the CPU, every launch, GEMM and copy through that
// backend (counted), its memory from its poisoning allocator.
#include <gtest/gtest.h>

#include <cmath>

#include "CheckingBackend.h"
#include "TestKernels.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::runtime::test;

namespace {

class CheckingBackendTest : public ::testing::Test {
protected:
  void SetUp() override { checking = kiln::testing::install_checking_backend(); }
  void TearDown() override { kiln::testing::uninstall_checking_backend(); }
  std::shared_ptr<kiln::testing::CheckingBackend> checking;
  const Device device{DeviceType::PrivateUse1, 0};
};

/// y = (x + 1) x transpose(w) (GEMM); z = 2 y; u = z + (x + 1) @ ... : a
/// chain with kernels, a GEMM, a transposed input (copied contiguous when
/// bound), a reshape view and a copy.
std::shared_ptr<LaunchExecutable> build(Device device, std::string *error) {
  LaunchExecutable::Builder b;
  b.setDevice(device);
  int x = b.addInput({2, 3}, kFloat32);
  int w = b.addInput({4, 3}, kFloat32);
  int flat = b.addReshape(x, {6});
  int x1 = b.addReshape(b.addKernel("add_one", addOne, {flat}, {{{6}, kFloat32}})[0], {2, 3});
  int y = b.addGemm(x1, b.addTranspose(w, {1, 0}));               // [2, 4]
  int yflat = b.addReshape(y, {8});
  int z = b.addKernel("times_two", timesTwo, {yflat}, {{{8}, kFloat32}})[0];
  int u = b.addKernel("add_two", addTwo, {z, yflat}, {{{8}, kFloat32}})[0]; // 3 y
  b.setOutputs({u, b.addCopy(b.addTranspose(y, {1, 0}))});
  return b.finish(error);
}

std::vector<float> values_of(const TensorView &v) {
  std::vector<float> out;
  std::vector<int64_t> index(v.sizes.size(), 0);
  for (int64_t k = 0; k < v.numel(); ++k) {
    out.push_back(at(v, index));
    for (int64_t d = static_cast<int64_t>(index.size()) - 1; d >= 0 && ++index[d] == v.sizes[d]; --d)
      index[d] = 0;
  }
  return out;
}

} // namespace

TEST_F(CheckingBackendTest, ExecutableRunsOnTheSecondBackendWithTheCpusResults) {
  std::string error;
  auto on_cpu = build(kCPU, &error);
  ASSERT_TRUE(on_cpu) << error;
  auto on_checking = build(device, &error);
  ASSERT_TRUE(on_checking) << error;
  EXPECT_EQ(on_checking->device(), device);

  const std::vector<float> xs = {0.5f, -1.0f, 2.0f, 3.0f, -0.25f, 1.5f};
  std::vector<float> ws(12);
  for (int i = 0; i < 12; ++i)
    ws[i] = static_cast<float>(i) * 0.25f - 1.0f;
  // w is passed transposed-stored ([3, 4] memory viewed as [4, 3]), so run()
  // copies it contiguous through the backend.
  auto transposed = [&](Allocator &alloc) {
    std::vector<float> t(12);
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 3; ++k)
        t[k * 4 + i] = ws[i * 3 + k];
    TensorView v = makeTensor({3, 4}, t, alloc);
    v.sizes = {4, 3};
    v.strides = {1, 4};
    return v;
  };
  auto cpu_out = on_cpu->run({makeTensor({2, 3}, xs), transposed(cpu_allocator())}, &error);
  ASSERT_EQ(cpu_out.size(), 2u) << error;
  const int64_t allocations_before = checking->allocations();
  Allocator &alloc = checking->allocator(0);
  auto out = on_checking->run({makeTensor({2, 3}, xs, alloc), transposed(alloc)}, &error);
  ASSERT_EQ(out.size(), 2u) << error;

  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_EQ(out[r].buffer->device(), device);
    EXPECT_EQ(values_of(out[r]), values_of(cpu_out[r])) << "result " << r;
  }
  // Independent check of one element: u[0] = 3 * sum_k (x[0][k] + 1) w[0][k].
  float y00 = 0;
  for (int k = 0; k < 3; ++k)
    y00 += (xs[k] + 1.0f) * ws[k];
  EXPECT_FLOAT_EQ(at(out[0], {0}), 3.0f * y00);
  EXPECT_EQ(checking->launches(), 3);  // add_one, times_two, add_two
  EXPECT_EQ(checking->gemms(), 1);
  EXPECT_EQ(checking->copies(), 2);    // binding the transposed w; the copy launch
  // Two inputs + the bound copy of w + arena + two results, at most (pools
  // may make the arena empty).
  EXPECT_GE(checking->allocations() - allocations_before, 4);
}

TEST_F(CheckingBackendTest, ACpuTensorIsRejectedByADeviceExecutable) {
  std::string error;
  auto exe = build(device, &error);
  ASSERT_TRUE(exe) << error;
  auto out = exe->run({makeTensor({2, 3}, std::vector<float>(6, 1.0f)),
                       makeTensor({4, 3}, std::vector<float>(12, 1.0f), checking->allocator(0))},
                      &error);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(error, "input 0: expected a tensor on privateuse1:0, got cpu");
}

TEST_F(CheckingBackendTest, AllocatorPoisonsFreshAndFreedMemoryAndCounts) {
  Allocator &alloc = checking->allocator(0);
  const MemoryStats before = alloc.stats();
  auto *p = static_cast<float *>(alloc.allocate(16 * sizeof(float)));
  EXPECT_TRUE(std::isnan(p[0]) && std::isnan(p[15])); // 0xFFFFFFFF is a NaN
  p[3] = 1.0f;
  EXPECT_EQ(alloc.stats().current_bytes - before.current_bytes, 64);
  EXPECT_EQ(alloc.stats().num_allocs - before.num_allocs, 1);
  alloc.deallocate(p, 16 * sizeof(float));
  EXPECT_TRUE(std::isnan(p[3])); // quarantined, poisoned: still mapped, reads NaN
  EXPECT_EQ(alloc.stats().current_bytes, before.current_bytes);
  EXPECT_EQ(alloc.device(), device);
}

TEST_F(CheckingBackendTest, NoBackendRegisteredIsAnError) {
  kiln::testing::uninstall_checking_backend();
  LaunchExecutable::Builder b;
  b.setDevice(device);
  int x = b.addInput({4}, kFloat32);
  b.setOutputs({b.addKernel("add_one", addOne, {x}, {{{4}, kFloat32}})[0]});
  std::string error;
  auto exe = b.finish(&error); // no constants: builds without the backend
  ASSERT_TRUE(exe) << error;
  EXPECT_TRUE(exe->run({makeTensor({4}, std::vector<float>(4, 1.0f))}, &error).empty());
  EXPECT_EQ(error, "no device backend registered for privateuse1:0");
  checking = kiln::testing::install_checking_backend();
}

TEST_F(CheckingBackendTest, StreamsAndEventsOfTheCpuBackend) {
  DeviceBackend &cpu = *cpu_backend();
  Stream &s = cpu.default_stream(0);
  EXPECT_EQ(s.device(), kCPU);
  auto start = cpu.create_event(0), end = cpu.create_event(0);
  start->record(s);
  s.synchronize();
  end->record(s);
  EXPECT_TRUE(end->query());
  EXPECT_GE(end->elapsed_seconds(*start), 0.0);
  EXPECT_EQ(checking->default_stream(0).device(), device);
}

// Convolution and max pooling steps (Builder::addConv / addMaxPool) run on
// the device's backend: x = 1..9 as [1, 1, 3, 3], w = ones [1, 1, 2, 2].
TEST_F(CheckingBackendTest, ConvAndMaxPoolStepsRunOnTheBackend) {
  LaunchExecutable::Builder b;
  b.setDevice(device);
  int x = b.addInput({1, 1, 3, 3}, kFloat32);
  int w = b.addInput({1, 1, 2, 2}, kFloat32);
  int y = b.addConv(ConvOp::Forward, Conv2dParams{}, x, w, {{1, 1, 2, 2}, kFloat32});
  Pool2dParams pool;
  pool.kernel = {2, 2};
  int values = b.addMaxPool(MaxPoolOp::Forward, pool, x, -1, {{1, 1, 2, 2}, kFloat32});
  int indices = b.addMaxPool(MaxPoolOp::Forward, pool, x, -1, {{1, 1, 2, 2}, DType::Int64});
  int gx = b.addMaxPool(MaxPoolOp::Backward, pool, y, indices, {{1, 1, 3, 3}, kFloat32});
  b.setOutputs({y, values, gx});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  Allocator &alloc = checking->allocator(0);
  auto out = exe->run({makeTensor({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, alloc),
                       makeTensor({1, 1, 2, 2}, {1, 1, 1, 1}, alloc)},
                      &error);
  ASSERT_EQ(out.size(), 3u) << error;
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{12, 16, 24, 28})); // 2x2 window sums
  EXPECT_EQ(values_of(out[1]), (std::vector<float>{5, 6, 8, 9}));     // window maxima
  // grad y = y scattered to the maxima's positions 4, 5, 7, 8.
  EXPECT_EQ(values_of(out[2]), (std::vector<float>{0, 0, 0, 0, 12, 16, 0, 24, 28}));
  EXPECT_EQ(checking->convs(), 4);
}

TEST_F(CheckingBackendTest, ConvStepWithInconsistentShapesFailsTheBuilder) {
  LaunchExecutable::Builder b;
  int x = b.addInput({1, 1, 3, 3}, kFloat32);
  int w = b.addInput({1, 1, 2, 2}, kFloat32);
  EXPECT_EQ(b.addConv(ConvOp::Forward, Conv2dParams{}, x, w, {{1, 1, 3, 3}, kFloat32}), -1);
  EXPECT_EQ(b.error(), "conv2d: inconsistent input float32 [1, 1, 3, 3], weight float32 [1, 1, 2, 2], output "
                       "float32 [1, 1, 3, 3] (groups 1)");
}
