// RunHooks::on_output_ready: once per output with its value, in launch
// order, right after the last launch of its view chain (inputs before the
// first launch), all before run() returns. Launches are counted by the checking
// backend (tests/support/CheckingBackend.h).
#include <gtest/gtest.h>

#include "CheckingBackend.h"
#include "TestKernels.h"

using namespace kiln;
using namespace kiln::runtime;
using namespace kiln::runtime::test;

namespace {

struct Ready {
  int output;
  int64_t launches_done; ///< the checking backend's launch count when it fired
  TensorView value;      ///< what the hook was given
};

class RunHooksTest : public ::testing::Test {
protected:
  void SetUp() override { checking = kiln::testing::install_checking_backend(); }
  void TearDown() override { kiln::testing::uninstall_checking_backend(); }
  std::shared_ptr<kiln::testing::CheckingBackend> checking;
  const Device device{DeviceType::PrivateUse1, 0};
};

} // namespace

TEST_F(RunHooksTest, OutputReadyFiresOncePerOutputInLaunchOrder) {
  const int64_t n = 16;
  LaunchExecutable::Builder b;
  b.setDevice(device);
  int x = b.addInput({n}, kFloat32);
  int a = b.addKernel("add_one", addOne, {x}, {{{n}, kFloat32}})[0];   // launch 0
  int c = b.addKernel("times_two", timesTwo, {a}, {{{n}, kFloat32}})[0]; // launch 1
  int av = b.addReshape(a, {4, 4});                                      // a view of a
  int d = b.addKernel("add_two", addTwo, {a, c}, {{{n}, kFloat32}})[0];  // launch 2
  int xv = b.addTranspose(x, {0});                                       // a view of an input
  // Outputs in an order unlike the launches': d, x, c, av, xv, a, c.
  b.setOutputs({d, x, c, av, xv, a, c});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;

  std::vector<Ready> ready;
  RunHooks hooks;
  hooks.on_output_ready = [&](int i, const TensorView &v) { ready.push_back({i, checking->launches(), v}); };
  std::vector<float> values(n, 1.0f);
  auto out = exe->run({makeTensor({n}, values, checking->allocator(0))}, &error, &hooks);
  ASSERT_EQ(out.size(), 7u) << error;
  // Launches: add_one, times_two, reshape (a view: no kernel), add_two,
  // transpose. Before the first: x (1); after add_one (1 kernel done): a
  // (5); after times_two: c (2, 6); after the reshape: av (3); after
  // add_two: d (0); after the transpose: xv (4). A view is reported when
  // its view launch has bound it, so the value given is the one returned.
  const std::vector<std::pair<int, int64_t>> want = {{1, 0}, {5, 1}, {2, 2}, {6, 2}, {3, 2}, {0, 3}, {4, 3}};
  ASSERT_EQ(ready.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(ready[k].output, want[k].first) << "call " << k;
    EXPECT_EQ(ready[k].launches_done, want[k].second) << "call " << k;
    const TensorView &returned = out[ready[k].output];
    EXPECT_EQ(ready[k].value.data(), returned.data()) << "call " << k;
    EXPECT_EQ(ready[k].value.sizes, returned.sizes) << "call " << k;
    EXPECT_EQ(ready[k].value.strides, returned.strides) << "call " << k;
  }
  EXPECT_EQ(checking->launches(), 3);
  EXPECT_FLOAT_EQ(at(out[0], {0}), 2.0f + 4.0f); // d = (x + 1) + 2 (x + 1)
}

TEST_F(RunHooksTest, DonatingRunAndNoHooksGiveTheSameResults) {
  const int64_t n = 8;
  LaunchExecutable::Builder b;
  b.setDevice(device);
  int x = b.addInput({n}, kFloat32, /*donatable=*/true);
  int a = b.addKernel("add_one", addOne, {x}, {{{n}, kFloat32}})[0];
  int c = b.addKernel("times_two", timesTwo, {a}, {{{n}, kFloat32}})[0];
  b.setOutputs({c, a});
  std::string error;
  auto exe = b.finish(&error);
  ASSERT_TRUE(exe) << error;
  std::vector<int> order;
  RunHooks hooks;
  hooks.on_output_ready = [&](int i, const TensorView &) { order.push_back(i); };
  auto donated = exe->run_donating({makeTensor({n}, std::vector<float>(n, 3.0f), checking->allocator(0))}, &error,
                                   &hooks);
  ASSERT_EQ(donated.size(), 2u) << error;
  EXPECT_EQ(order, (std::vector<int>{1, 0}));
  auto plain = exe->run({makeTensor({n}, std::vector<float>(n, 3.0f), checking->allocator(0))}, &error);
  ASSERT_EQ(plain.size(), 2u) << error;
  EXPECT_FLOAT_EQ(at(plain[0], {n - 1}), 8.0f);
  EXPECT_FLOAT_EQ(at(donated[0], {n - 1}), 8.0f);
}
