// CUDA tensors on the Gloo process group, staged through pinned host memory
// (runtime/src/distributed/HostStaging.h), on the CUDA-on-CPU simulator
// (KILN_CUDA_SIM=1, two devices: rank r uses cuda:r % 2): every collective
// on CUDA tensors gives exactly what the same collective gives on CPU
// tensors, through the CUDA backend's pinned allocator (its counters show
// the staging path was taken and every block was returned). Ranks are
// threads meeting through a HashStore (thread_ranks.h).
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/distributed/ProcessGroup.h"
#include "thread_ranks.h"

namespace kiln::runtime::distributed {
namespace {

using namespace std::chrono_literals;

class GlooCudaStaging : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    if (!std::getenv("KILN_TEST_REAL_CUDA")) {
      ::setenv("KILN_CUDA_SIM", "1", 1);
      ::setenv("KILN_SIM_DEVICES", "2", 1);
    }
  }
  void SetUp() override {
    std::string why;
    if (!cuda::ensure_cuda_backend(&why)) GTEST_SKIP() << why;
  }
};

DeviceBackend &cuda_backend() { return *find_backend(DeviceType::CUDA); }

Device rank_device(int rank) { return Device(DeviceType::CUDA, rank % cuda_backend().device_count()); }

TensorView cpu_view(DType t, int64_t n) {
  return TensorView{Buffer::make(static_cast<size_t>(n) * itemsize(t)), 0, {n}, {1}, t};
}

/// A CUDA copy of `src` (a CPU view) on `device`.
TensorView cuda_copy(const TensorView &src, Device device) {
  const size_t bytes = static_cast<size_t>(src.numel()) * itemsize(src.dtype);
  TensorView v{Buffer::make(bytes, cuda_backend().allocator(device.index)), 0, src.sizes, src.strides, src.dtype};
  cuda_backend().copy(v.data(), device, src.data(), kCPU, bytes);
  return v;
}

std::vector<uint8_t> bytes_of(const TensorView &v) {
  std::vector<uint8_t> out(static_cast<size_t>(v.numel()) * itemsize(v.dtype));
  cuda_backend().copy(out.data(), kCPU, v.data(), v.buffer->device(), out.size());
  return out;
}
std::vector<uint8_t> cpu_bytes_of(const TensorView &v) {
  const auto *p = static_cast<const uint8_t *>(v.data());
  return {p, p + static_cast<size_t>(v.numel()) * itemsize(v.dtype)};
}

/// Fills `v` with values depending on rank and index, exact in its dtype.
void fill(const TensorView &v, int rank, int salt) {
  for (int64_t i = 0; i < v.numel(); ++i) {
    const int x = static_cast<int>((i * 7 + salt) % 23) * (rank + 1) - 11;
    switch (v.dtype) {
    case DType::Float32: static_cast<float *>(v.data())[i] = static_cast<float>(x) * 0.25f; break;
    case DType::Float64: static_cast<double *>(v.data())[i] = x * 0.125; break;
    case DType::Int64: static_cast<int64_t *>(v.data())[i] = x; break;
    case DType::Int32: static_cast<int32_t *>(v.data())[i] = x; break;
    case DType::Bool: static_cast<uint8_t *>(v.data())[i] = (x + rank) % 3 == 0; break;
    case DType::Float16: static_cast<uint16_t *>(v.data())[i] = static_cast<uint16_t>(0x3c00 + (x & 0xff)); break;
    case DType::BFloat16: static_cast<uint16_t *>(v.data())[i] = static_cast<uint16_t>(0x3f80 + (x & 0x7f)); break;
    }
  }
}

/// The ranks: threads over loopback Gloo (thread_ranks.h), with 20 s
/// timeouts (the simulator's copies are slow on a loaded machine).
void run_ranks(int size, const std::function<void(ProcessGroup &)> &body) {
  GlooOptions options;
  options.timeout = 20s;
  test::run_thread_ranks(size, body, options, 20s);
}

TEST_F(GlooCudaStaging, AllreduceOfCudaTensorsEqualsTheCpuResultInEveryDTypeAndOp) {
  auto *pinned = cuda::pinned_allocator();
  ASSERT_NE(pinned, nullptr);
  const int64_t allocs_before = pinned->host_stats().num_allocs;
  const int size = 3;
  run_ranks(size, [](ProcessGroup &pg) {
    const int64_t n = 1001;
    for (DType t : {DType::Float32, DType::Float64, DType::Int64, DType::Int32, DType::Float16, DType::BFloat16,
                    DType::Bool}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
        if (t == DType::Bool && op == ReduceOp::Avg) continue;
        auto cpu = cpu_view(t, n);
        fill(cpu, pg.rank(), static_cast<int>(op));
        auto gpu = cuda_copy(cpu, rank_device(pg.rank()));
        auto w_cuda = pg.allreduce(gpu, op);
        auto w_cpu = pg.allreduce(cpu, op);
        w_cuda->wait();
        w_cpu->wait();
        ASSERT_EQ(bytes_of(gpu), cpu_bytes_of(cpu)) << dtype_name(t) << " " << reduce_op_name(op);
      }
    }
  });
  EXPECT_GT(pinned->host_stats().num_allocs, allocs_before) << "the CUDA tensors did not go through pinned memory";
  EXPECT_EQ(pinned->host_stats().allocated_bytes.current, 0) << "a staging block was not returned";
}

TEST_F(GlooCudaStaging, BroadcastAllgatherReduceScatterOfCudaTensorsEqualTheCpuResults) {
  const int size = 2;
  run_ranks(size, [size](ProcessGroup &pg) {
    const Device dev = rank_device(pg.rank());
    const int64_t n = 257;
    for (int root = 0; root < size; ++root) {
      auto cpu = cpu_view(DType::Float32, n);
      fill(cpu, pg.rank(), root);
      auto gpu = cuda_copy(cpu, dev);
      pg.broadcast(gpu, root)->wait();
      pg.broadcast(cpu, root)->wait();
      ASSERT_EQ(bytes_of(gpu), cpu_bytes_of(cpu)) << "broadcast from " << root;
    }
    auto in_cpu = cpu_view(DType::Int64, n);
    fill(in_cpu, pg.rank(), 5);
    auto in_gpu = cuda_copy(in_cpu, dev);
    std::vector<TensorView> outs_cpu, outs_gpu;
    for (int r = 0; r < size; ++r) {
      outs_cpu.push_back(cpu_view(DType::Int64, n));
      outs_gpu.push_back(cuda_copy(outs_cpu.back(), dev));
    }
    pg.allgather(outs_gpu, in_gpu)->wait();
    pg.allgather(outs_cpu, in_cpu)->wait();
    for (int r = 0; r < size; ++r) ASSERT_EQ(bytes_of(outs_gpu[r]), cpu_bytes_of(outs_cpu[r])) << "allgather " << r;
    // Mixed: CPU inputs, a CUDA output.
    std::vector<TensorView> parts_cpu, parts_gpu;
    for (int r = 0; r < size; ++r) {
      parts_cpu.push_back(cpu_view(DType::Float64, n));
      fill(parts_cpu.back(), pg.rank(), r);
      parts_gpu.push_back(cuda_copy(parts_cpu.back(), dev));
    }
    auto out_cpu = cpu_view(DType::Float64, n);
    auto out_gpu = cuda_copy(out_cpu, dev);
    pg.reduce_scatter(out_gpu, parts_gpu, ReduceOp::Avg)->wait();
    pg.reduce_scatter(out_cpu, parts_cpu, ReduceOp::Avg)->wait();
    ASSERT_EQ(bytes_of(out_gpu), cpu_bytes_of(out_cpu)) << "reduce_scatter";
    auto mixed_out = cuda_copy(out_cpu, dev);
    pg.reduce_scatter(mixed_out, parts_cpu, ReduceOp::Avg)->wait();
    ASSERT_EQ(bytes_of(mixed_out), cpu_bytes_of(out_cpu)) << "reduce_scatter, CPU inputs into a CUDA output";
  });
}

TEST_F(GlooCudaStaging, AStridedCudaTensorIsInvalidAtTheCall) {
  run_ranks(1, [](ProcessGroup &pg) {
    auto cpu = cpu_view(DType::Float32, 8);
    auto gpu = cuda_copy(cpu, rank_device(0));
    gpu.sizes = {4, 2};
    gpu.strides = {1, 4};
    try {
      pg.allreduce(gpu, ReduceOp::Sum);
      FAIL() << "a strided tensor accepted";
    } catch (const DistributedError &e) {
      EXPECT_EQ(e.kind(), DistributedError::Kind::Invalid);
      EXPECT_NE(std::string(e.what()).find("must be contiguous"), std::string::npos) << e.what();
    }
  });
}

} // namespace
} // namespace kiln::runtime::distributed
