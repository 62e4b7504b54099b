// Eager ops on a second device: the checking device (checking_device.h,
// DeviceType::PrivateUse1, host memory from its own poisoning allocator) gets
// the CPU kernels through register_cpu_kernels_for. Every result must be
// bit-identical to the CPU's and live on privateuse1:0; mixing devices and a
// device without kernels give kiln::Error naming the op and the devices.
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <cmath>

#include "checking_device.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using testing::kChecking;

class DeviceDispatch : public ::testing::Test {
protected:
  void SetUp() override { device = testing::install_checking_device(); }
  std::shared_ptr<testing::CheckingBackend> device;
};

/// Same shape, dtype and bytes (bit-identical), `on` on the checking device.
void expect_same(const Tensor &cpu, const Tensor &on) {
  ASSERT_TRUE(cpu.device().is_cpu());
  EXPECT_EQ(on.device(), kChecking);
  EXPECT_EQ(on.device().str(), "privateuse1:0");
  ASSERT_EQ(cpu.sizes(), on.sizes());
  ASSERT_EQ(cpu.dtype(), on.dtype());
  Tensor a = cpu.contiguous(), b = on.cpu().contiguous();
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.numel() * itemsize(a.dtype())), 0);
}

std::string error_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(DeviceDispatch, FactoriesAndCopiesLandOnTheDevice) {
  const int64_t allocs = device->allocations();
  Tensor z = zeros({2, 3}, kFloat32, kChecking);
  EXPECT_EQ(z.device(), kChecking);
  EXPECT_GT(device->allocations(), allocs);
  manual_seed(7);
  Tensor r_cpu = randn({5});
  manual_seed(7);
  expect_same(r_cpu, randn({5}, kFloat32, kChecking));
  expect_same(arange(4), arange(4, kInt64, kChecking));
  expect_same(full({3}, 2.5), full({3}, 2.5, kFloat32, kChecking));
  Tensor x = tensor({1.f, -2.f, 3.f}, {3});
  Tensor on = x.to(kChecking);
  expect_same(x, on);
  expect_same(zeros_like(x), zeros_like(on));
  EXPECT_EQ(empty_like(on).device(), kChecking);
  EXPECT_DOUBLE_EQ(on.sum().item(), 2.0);
  EXPECT_EQ(on.to_vector<float>(), x.to_vector<float>());
}

TEST_F(DeviceDispatch, EagerOpsMatchTheCpuBitForBit) {
  manual_seed(1);
  Tensor a = randn({4, 5}), b = randn({5}), m = randn({5, 3}), i = randn({2, 3, 6, 6}), w = randn({4, 3, 3, 3});
  Tensor da = a.to(kChecking), db = b.to(kChecking), dm = m.to(kChecking), di = i.to(kChecking), dw = w.to(kChecking);
  // pointwise, broadcasting binary, comparisons, where
  expect_same(exp(a), exp(da));
  expect_same(tanh(a) + sigmoid(a), tanh(da) + sigmoid(da));
  expect_same(gelu(a), gelu(da));
  expect_same(a * b - b / 3.0, da * db - db / 3.0);
  expect_same(where(gt(a, b), a, b * 2.0), where(gt(da, db), da, db * 2.0));
  expect_same(a.pow(2.0).sqrt(), da.pow(2.0).sqrt());
  // reductions
  expect_same(a.sum({1}), da.sum({1}));
  expect_same(a.mean(), da.mean());
  expect_same(a.amax({0}), da.amax({0}));
  expect_same(a.argmax(1), da.argmax(1));
  expect_same(logsumexp(a, {1}), logsumexp(da, {1}));
  expect_same(cumsum(a, 0), cumsum(da, 0));
  expect_same(F::softmax(a, 1), F::softmax(da, 1));
  // matmul, bmm, conv2d, pooling
  expect_same(a.matmul(m), da.matmul(dm));
  expect_same(a.unsqueeze(0).expand({2, 4, 5}).matmul(m), da.unsqueeze(0).expand({2, 4, 5}).matmul(dm));
  expect_same(F::conv2d(i, w, Tensor(), {1, 1}, {1, 1}), F::conv2d(di, dw, Tensor(), {1, 1}, {1, 1}));
  expect_same(F::max_pool2d(i, {2, 2}), F::max_pool2d(di, {2, 2}));
  // indexing and views
  Tensor idx = tensor(std::vector<int64_t>{3, 0, 2}, {3});
  expect_same(index_select(a, 0, idx), index_select(da, 0, idx.to(kChecking)));
  expect_same(cat({a, a * 2.0}, 1), cat({da, da * 2.0}, 1));
  expect_same(a.t().contiguous(), da.t().contiguous());
  expect_same(a.narrow(1, 1, 3).reshape({-1}), da.narrow(1, 1, 3).reshape({-1}));
  expect_same(slice(a, 1, 0, 5, 2), slice(da, 1, 0, 5, 2));
  expect_same(a.to(kBFloat16), da.to(kBFloat16));
}

/// A two-layer MLP's loss and its gradients, on `device`.
std::vector<Tensor> mlp_grads(Device device) {
  manual_seed(3);
  nn::Sequential net;
  net.push_back(std::make_shared<nn::Linear>(6, 8));
  net.push_back(std::make_shared<nn::GELU>());
  net.push_back(std::make_shared<nn::Linear>(8, 3));
  net.to(device);
  Tensor x = randn({5, 6}, kFloat32, device);
  Tensor target = tensor(std::vector<int64_t>{0, 2, 1, 1, 0}, {5}, device);
  Tensor loss = F::cross_entropy(net.forward(x), target);
  loss.backward();
  std::vector<Tensor> out{loss.detach()};
  for (const Tensor &p : net.parameters()) out.push_back(p.grad());
  return out;
}

TEST_F(DeviceDispatch, BackwardOfAnMlpMatchesTheCpu) {
  std::vector<Tensor> cpu = mlp_grads(kCPU), on = mlp_grads(kChecking);
  ASSERT_EQ(cpu.size(), on.size());
  for (size_t k = 0; k < cpu.size(); ++k) expect_same(cpu[k], on[k]);
}

/// Parameters after three steps of `make_opt` on a fixed quadratic loss.
template <class MakeOpt> std::vector<Tensor> after_steps(Device device, MakeOpt make_opt) {
  manual_seed(5);
  Tensor w = randn({4, 3}, kFloat32, device).requires_grad_();
  Tensor b = zeros({3}, kFloat32, device).requires_grad_();
  Tensor x = randn({6, 4}, kFloat32, device);
  auto opt = make_opt(std::vector<Tensor>{w, b});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor y = x.matmul(w) + b;
    (y * y).mean().backward();
    opt.step();
  }
  return {w.detach(), b.detach()};
}

TEST_F(DeviceDispatch, OptimizerStepsMatchTheCpu) {
  auto sgd = [](std::vector<Tensor> p) { return optim::SGD(p, optim::SGDOptions(0.1).momentum(0.9)); };
  auto adam = [](std::vector<Tensor> p) { return optim::Adam(p, optim::AdamOptions(0.01).weight_decay(0.1)); };
  auto adamw = [](std::vector<Tensor> p) { return optim::AdamW(p, optim::AdamWOptions(0.01)); };
  for (auto [cpu, on] : {std::pair{after_steps(kCPU, sgd), after_steps(kChecking, sgd)},
                         std::pair{after_steps(kCPU, adam), after_steps(kChecking, adam)},
                         std::pair{after_steps(kCPU, adamw), after_steps(kChecking, adamw)}})
    for (size_t k = 0; k < cpu.size(); ++k) expect_same(cpu[k], on[k]);
}

TEST_F(DeviceDispatch, ToCopyBackwardReturnsTheGradientToTheSource) {
  Tensor x = tensor({1.f, 2.f}, {2}).requires_grad_();
  Tensor y = x.to(kChecking);
  EXPECT_EQ(y.grad_fn()->name(), "ToCopyBackward");
  (y * y).sum().backward();
  EXPECT_TRUE(x.grad().device().is_cpu());
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2.f, 4.f}));
}

TEST_F(DeviceDispatch, ModuleToMovesParametersAndBuffers) {
  nn::BatchNorm1d bn(3);
  Tensor w = bn.weight;
  bn.to(kChecking);
  for (const Tensor &p : bn.parameters()) EXPECT_EQ(p.device(), kChecking);
  for (const Tensor &b : bn.buffers()) EXPECT_EQ(b.device(), kChecking);
  EXPECT_EQ(w.device(), kChecking);  // the handle kept its identity
}

TEST_F(DeviceDispatch, MixingDevicesNamesBoth) {
  Tensor a = ones({2}), b = ones({2}, kFloat32, kChecking);
  EXPECT_NE(error_of([&] { add(a, b); }).find("add: expected all tensors on the same device, got cpu and privateuse1:0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { a.matmul(b); }).find("matmul: expected all tensors on the same device"), std::string::npos);
  EXPECT_NE(error_of([&] { cat({b, a}, 0); }).find("got privateuse1:0 and cpu"), std::string::npos);
  // A 0-d cpu tensor is a scalar and may join any device (as in PyTorch).
  expect_same(ones({2}) * full({}, 3.0), b * full({}, 3.0));
}

TEST_F(DeviceDispatch, ADeviceWithoutKernelsSaysWhatToDo) {
  Tensor b = ones({2}, kFloat32, kChecking);  // allocation needs no kernel
  dispatch::clear_kernels_for(DeviceType::PrivateUse1);
  const std::string e = error_of([&] { b.exp(); });
  dispatch::register_cpu_kernels_for(DeviceType::PrivateUse1);
  EXPECT_NE(e.find("exp: no privateuse1 kernel for the elementwise unary ops"), std::string::npos) << e;
  EXPECT_NE(e.find(".cpu()"), std::string::npos) << e;
}

// A freed tensor's memory reads as NaN (the allocator's 0xFF poison; freed
// blocks stay mapped in its quarantine), so a kernel that reads freed memory
// gives NaN results instead of plausible stale values.
TEST_F(DeviceDispatch, FreedDeviceMemoryIsPoisoned) {
  runtime::Allocator &alloc = device->allocator(0);
  const int64_t live = alloc.stats().current_bytes;
  const float *data = nullptr;
  {
    Tensor t = ones({16}, kFloat32, kChecking);
    data = t.data_ptr<float>();
    EXPECT_EQ(data[3], 1.0f);
  }
  EXPECT_EQ(alloc.stats().current_bytes, live);
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(data[i])) << i;
}

}  // namespace
}  // namespace kiln
