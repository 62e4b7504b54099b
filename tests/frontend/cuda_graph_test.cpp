// kiln::cuda::Graph (kiln/cuda_graph.h): eager CUDA tensor ops captured on
// the simulator (KILN_CUDA_SIM=1) and replayed with new contents of the
// static input must give what running the ops eagerly gives, bit for bit;
// a synchronizing op during the capture is a kiln::Error from capture_end
// with CUDA's reason.
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "kiln/cuda.h"
#include "kiln/cuda_graph.h"
#include "kiln/kiln.h"
#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/CachingAllocator.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CurrentStream.h"
#include "kiln/runtime/cuda/DeviceApi.h"

namespace kiln {
namespace {

const Device kCuda0{DeviceType::CUDA, 0};

class CudaGraphEager : public ::testing::Test {
protected:
  void SetUp() override {
    if (!std::getenv("KILN_TEST_REAL_CUDA")) ::setenv("KILN_CUDA_SIM", "1", 1);
  }
};

bool bitwise_equal(const Tensor &a, const Tensor &b) {
  Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * itemsize(x.dtype())) == 0;
}

TEST_F(CudaGraphEager, ReplaysEqualTheOpsRunEagerly) {
  manual_seed(3);
  Tensor x = zeros({16, 33}).to(kCuda0); // the static input
  Tensor w = randn({33}).to(kCuda0), b = randn({16, 1}).to(kCuda0), s = randn({16, 33}).to(kCuda0);
  auto step = [&](const Tensor &in) { return ((in * w + b).relu() - (in * s).exp()).sum({1}); };
  (void)step(x); // compile the kernels outside the capture (not required; keeps the capture short)

  cuda::Graph graph;
  graph.capture_begin();
  Tensor y = step(x);
  graph.capture_end();
  ASSERT_TRUE(graph.is_captured());
  EXPECT_NE(graph.pool(), 0u);
  for (int round = 0; round < 4; ++round) {
    x.copy_(randn({16, 33}).to(kCuda0));
    graph.replay();
    cuda::synchronize();
    EXPECT_TRUE(bitwise_equal(y, step(x))) << "round " << round;
  }
  graph.reset();
  EXPECT_FALSE(graph.is_captured());
  EXPECT_THROW(graph.replay(), Error);
}

// Two shapes, two graphs, one pool: the smaller shape's capture takes the
// blocks the first graph's temporaries left in the pool (no new segment),
// and each graph keeps giving its own shape's result.
TEST_F(CudaGraphEager, GraphsOfTwoShapesShareOnePool) {
  manual_seed(5);
  Tensor big = zeros({32, 40}).to(kCuda0), small = zeros({8, 40}).to(kCuda0), w = randn({40}).to(kCuda0);
  auto step = [&](const Tensor &in) { return ((in * w).exp() + in).relu().sum({1}); };
  (void)step(big);
  (void)step(small);
  auto *alloc = dynamic_cast<runtime::cuda::CachingAllocator *>(&runtime::find_backend(DeviceType::CUDA)->allocator(0));
  ASSERT_NE(alloc, nullptr);
  const uint64_t pool = cuda::graph_pool_handle();
  cuda::Graph first, second;
  first.capture_begin(pool);
  Tensor y_big = step(big); // its temporaries are freed inside the capture, back to the pool
  first.capture_end();
  const int64_t reserved = alloc->graph_pool_stats(pool).reserved_bytes;
  const int64_t segments = alloc->memory_stats().num_device_alloc;
  second.capture_begin(pool);
  Tensor y_small = step(small);
  second.capture_end();
  EXPECT_EQ(second.pool(), pool);
  EXPECT_EQ(alloc->graph_pool_stats(pool).use_count, 2);
  EXPECT_EQ(alloc->graph_pool_stats(pool).reserved_bytes, reserved) << "the second shape took no new memory";
  EXPECT_EQ(alloc->memory_stats().num_device_alloc, segments);
  for (int round = 0; round < 2; ++round) {
    big.copy_(randn({32, 40}).to(kCuda0));
    small.copy_(randn({8, 40}).to(kCuda0));
    first.replay();
    second.replay();
    cuda::synchronize();
    EXPECT_TRUE(bitwise_equal(y_big, step(big))) << "round " << round;
    EXPECT_TRUE(bitwise_equal(y_small, step(small))) << "round " << round;
  }
}

TEST_F(CudaGraphEager, ASynchronizingOpInvalidatesTheCaptureWithTheReason) {
  Tensor a = randn({4, 8}).to(kCuda0), m = randn({8, 3}).to(kCuda0);
  cuda::Graph graph;
  graph.capture_begin();
  // Synchronizing the current (capturing) stream, as a host read of a
  // result would: CUDA refuses it. (The simulator's GEMM is a host function
  // on the stream now, DeviceApi::launch_host_func: capturable.)
  try {
    (void)a.matmul(m);
    runtime::cuda::device_api(0)->stream_synchronize(runtime::cuda::current_stream(0));
    FAIL() << "expected a CudaError";
  } catch (const std::exception &e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"), std::string::npos) << e.what();
  }
  try {
    graph.capture_end();
    FAIL() << "expected kiln::Error";
  } catch (const Error &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kiln::cuda::Graph::capture_end: CudaGraph::capture_end: CudaGraph on cuda:0: the capture "
                        "failed: cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("invalidated by cuStreamSynchronize"), std::string::npos) << what;
  }
  EXPECT_FALSE(graph.is_captured());
  EXPECT_TRUE(bitwise_equal(a.matmul(m), a.cpu().matmul(m.cpu()))); // eager works again after the capture
}

} // namespace
} // namespace kiln
