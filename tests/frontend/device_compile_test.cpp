// The backend seams end to end: a second device backend (tests/support's
// checking PrivateUse1 device: poisoned host memory, counted launches) runs
// eager ops, autograd and *compiled* training steps of a small GPT, with
// results bit-identical to the CPU's. The CPU compile target is registered
// for that device type (its memory is host-accessible, so the CPU's kernels
// are valid there); the executables allocate from the device's allocator and
// launch through its backend.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checking_device.h"
#include "kiln/codegen/Target.h"
#include "kiln/kiln.h"
#include "tiny_models.h"

namespace kiln {
namespace {

using testing::kChecking;

constexpr int64_t V = 12, T = 8, B = 4, C = 16;

/// Exactly equal: same dtype, shape and bytes.
void expect_same(const Tensor &got, const Tensor &want, const std::string &what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  std::vector<double> g = got.cpu().to_vector<double>(), w = want.cpu().to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_EQ(std::memcmp(&g[i], &w[i], sizeof(double)), 0) << what << " [" << i << "]: " << g[i] << " vs " << w[i];
}

std::shared_ptr<test_models::TinyGPT> make_gpt() {
  manual_seed(11);
  return std::make_shared<test_models::TinyGPT>(V, T, C);
}

/// Fixed batches: token ids [B, T] and next-token targets [B*T].
std::vector<std::pair<Tensor, Tensor>> batches(Device device) {
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int s = 0; s < 3; ++s) {
    std::vector<int64_t> ids(B * T), targets(B * T);
    for (int64_t i = 0; i < B * T; ++i) {
      ids[i] = (7 * i + 3 * s) % V;
      targets[i] = (5 * i + s + 1) % V;
    }
    out.emplace_back(tensor(ids, {B, T}).to(device), tensor(targets, {B * T}).to(device));
  }
  return out;
}

struct StepResult {
  std::vector<Tensor> losses;
  std::vector<Tensor> params;
};

/// Three compiled AdamW steps of the TinyGPT with its parameters on `device`.
StepResult train_compiled(Device device) {
  auto gpt = make_gpt();
  gpt->to(device);
  auto model = compile(gpt);
  optim::AdamW opt(model->parameters(), optim::AdamWOptions(3e-3));
  StepResult r;
  for (auto &[ids, targets] : batches(device)) {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model->forward(ids), targets);
    EXPECT_EQ(loss.device(), device);
    loss.backward();
    opt.step();
    r.losses.push_back(loss.detach());
    EXPECT_TRUE(model->graph_breaks().empty()) << "graph break at " << model->graph_breaks().front();
  }
  for (const Tensor &p : gpt->parameters()) {
    EXPECT_EQ(p.device(), device);
    r.params.push_back(p.detach());
  }
  return r;
}

class DeviceCompile : public ::testing::Test {
protected:
  void SetUp() override {
    device = testing::install_checking_device();
    codegen::register_target(DeviceType::PrivateUse1, codegen::cpuTarget());
  }
  std::shared_ptr<testing::CheckingBackend> device;
};

TEST_F(DeviceCompile, CompiledTrainingStepsMatchTheCpuBitForBit) {
  StepResult cpu = train_compiled(kCPU);
  device->reset_counts();
  const int64_t allocs = device->allocations();
  StepResult dev = train_compiled(kChecking);
  // The compiled executables ran on the device's backend: kernels, GEMMs
  // and device memory (the counts are the executables', not the eager ops').
  EXPECT_GT(device->launches(), 0);
  EXPECT_GT(device->gemms(), 0);
  EXPECT_GT(device->allocations(), allocs);
  ASSERT_EQ(dev.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) expect_same(dev.losses[i], cpu.losses[i], "loss " + std::to_string(i));
  ASSERT_EQ(dev.params.size(), cpu.params.size());
  for (size_t i = 0; i < cpu.params.size(); ++i) expect_same(dev.params[i], cpu.params[i], "param " + std::to_string(i));
}

TEST_F(DeviceCompile, AnInputOnAnotherDeviceThanTheParametersIsAnError) {
  auto gpt = make_gpt();
  gpt->to(kChecking);
  auto model = compile(gpt);
  Tensor ids = batches(kCPU)[0].first;
  try {
    model->forward(ids);
    FAIL() << "expected a kiln::Error";
  } catch (const Error &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("kiln::compile"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
    EXPECT_NE(m.find("privateuse1:0"), std::string::npos) << m;
  }
}

TEST_F(DeviceCompile, ADeviceWithoutACompileTargetIsAnError) {
  codegen::register_target(DeviceType::PrivateUse1, nullptr);
  auto gpt = make_gpt();
  gpt->to(kChecking);
  auto model = compile(gpt);
  try {
    model->forward(batches(kChecking)[0].first);
    FAIL() << "expected a kiln::Error";
  } catch (const Error &e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no compile target for device privateuse1:0"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kiln
