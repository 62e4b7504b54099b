// CUDA tensors on the CUDA-on-CPU simulator (KILN_CUDA_SIM=1): the first
// CUDA tensor registers the simulator's backend (runtime/src/cuda:
// SimDevice over the shared CudaBackend), buffers come from the CUDA caching
// allocator (PyTorch's 2 MiB small segments), copies round-trip every dtype
// bit for bit, and without the switch the error says what to do.
// ctest runs each test in its own process, so each sets the environment first.
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/runtime/DeviceBackend.h"

namespace kiln {
namespace {

const Device kCuda0{DeviceType::CUDA, 0};

/// The simulator serves cuda:0, unless the device script runs this binary
/// on a real GPU (KILN_TEST_REAL_CUDA=1, bench/gpu/run_checks.sh).
void use_simulator() {
  if (!std::getenv("KILN_TEST_REAL_CUDA")) ::setenv("KILN_CUDA_SIM", "1", 1);
}

TEST(CudaSimTensor, WithoutTheSwitchTheErrorSaysWhatToDo) {
  ::unsetenv("KILN_CUDA_SIM");
  if (runtime::registered_backend(DeviceType::CUDA))
    GTEST_SKIP() << "skipped: a CUDA backend is already registered in this process";
  if (cuda::is_available()) GTEST_SKIP() << "skipped: " << cuda::availability_reason();
  try {
    Tensor::empty({2}, kFloat32, kCuda0);
    ADD_FAILURE() << "a CUDA tensor without a backend";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("KILN_CUDA_SIM=1"), std::string::npos) << e.what();
  }
}

TEST(CudaSimTensor, RoundTripsEveryDtypeBitForBit) {
  use_simulator();
  manual_seed(5);
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    Tensor x = randn({3, 5}).to(dt);
    Tensor on_device = x.to(kCuda0);
    EXPECT_EQ(on_device.device(), kCuda0);
    EXPECT_EQ(on_device.dtype(), dt);
    Tensor back = on_device.to(kCPU);
    ASSERT_EQ(back.numel(), x.numel());
    EXPECT_EQ(std::memcmp(back.raw_data(), x.raw_data(), x.numel() * itemsize(dt)), 0) << dtype_name(dt);
  }
  Tensor ids = tensor(std::vector<int64_t>{7, -3, 1LL << 40}, {3});
  EXPECT_EQ(ids.to(kCuda0).cpu().to_vector<int64_t>(), (std::vector<int64_t>{7, -3, 1LL << 40}));
}

TEST(CudaSimTensor, BuffersComeFromTheCachingAllocator) {
  use_simulator();
  runtime::DeviceBackend *b = runtime::find_backend(DeviceType::CUDA);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->host_accessible());
  runtime::Allocator &alloc = b->allocator(0);
  const int64_t before = alloc.stats().current_bytes;
  {
    Tensor a = Tensor::empty({100}, kFloat32, kCuda0), c = Tensor::empty({10}, kFloat32, kCuda0);
    // 400 and 40 bytes round up to 512 each (PyTorch's kMinBlockSize).
    EXPECT_EQ(alloc.stats().current_bytes - before, 1024);
  }
  EXPECT_EQ(alloc.stats().current_bytes, before);
}

TEST(CudaSimTensor, GradientsFlowBackAcrossTheCopy) {
  use_simulator();
  Tensor x = randn({4}).requires_grad_(true);
  Tensor y = x.to(kCuda0).to(kCPU);  // ToCopyBackward twice
  (y * 3.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>(4, 3.0f)));
}

} // namespace
} // namespace kiln
