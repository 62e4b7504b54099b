// The NCCL process group (runtime/src/distributed/NcclProcessGroup.cpp).
// Here (no GPU): the dtype and reduce-op mapping against nccl.h, the
// loading and availability errors, argument checks. On a GPU
// (bench/gpu/run_checks.sh, KILN_TEST_REAL_CUDA=1): one rank's collectives
// on CUDA tensors against their closed forms, on the default and on a
// created current stream; the cases that need a GPU skip elsewhere with
// nccl_unavailable_reason().
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include <gtest/gtest.h>

#include "../../../runtime/src/distributed/NcclTypes.h"
#include "kiln/runtime/DeviceBackend.h"
#include "kiln/runtime/cuda/Availability.h"
#include "kiln/runtime/cuda/CudaBackend.h"
#include "kiln/runtime/cuda/CurrentStream.h"
#include "kiln/runtime/distributed/ProcessGroup.h"

#ifdef KILN_TEST_HAVE_NCCL_H
#include <nccl.h>
#endif

namespace kiln::runtime::distributed {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

TEST(NcclTypes, EveryDTypeMapsToItsNcclDataType) {
  EXPECT_EQ(nccl::data_type(DType::Float32), 7);
  EXPECT_EQ(nccl::data_type(DType::Float64), 8);
  EXPECT_EQ(nccl::data_type(DType::Float16), 6);
  EXPECT_EQ(nccl::data_type(DType::BFloat16), 9);
  EXPECT_EQ(nccl::data_type(DType::Int64), 4);
  EXPECT_EQ(nccl::data_type(DType::Int32), 2);
  EXPECT_EQ(nccl::data_type(DType::Bool), 1); // ncclUint8: a bool is one byte
#ifdef KILN_TEST_HAVE_NCCL_H
  // The toolkit's own header (found at configure time) agrees.
  EXPECT_EQ(nccl::data_type(DType::Float32), ncclFloat32);
  EXPECT_EQ(nccl::data_type(DType::Float64), ncclFloat64);
  EXPECT_EQ(nccl::data_type(DType::Float16), ncclFloat16);
  EXPECT_EQ(nccl::data_type(DType::BFloat16), ncclBfloat16);
  EXPECT_EQ(nccl::data_type(DType::Int64), ncclInt64);
  EXPECT_EQ(nccl::data_type(DType::Int32), ncclInt32);
  EXPECT_EQ(nccl::data_type(DType::Bool), ncclUint8);
  EXPECT_EQ(nccl::kInProgress, ncclInProgress);
  EXPECT_EQ(sizeof(cuda::ncclUniqueId), sizeof(ncclUniqueId));
#endif
}

TEST(NcclTypes, ReduceOpsAndTheBoolRules) {
  EXPECT_EQ(nccl::reduce_op(ReduceOp::Sum, DType::Float32, "allreduce"), 0);
  EXPECT_EQ(nccl::reduce_op(ReduceOp::Max, DType::Int64, "allreduce"), 2);
  EXPECT_EQ(nccl::reduce_op(ReduceOp::Min, DType::BFloat16, "allreduce"), 3);
  EXPECT_EQ(nccl::reduce_op(ReduceOp::Avg, DType::Float16, "allreduce"), 4);
  // bool (c10d): sum and max are logical or (ncclMax), min is and (ncclMin).
  EXPECT_EQ(nccl::reduce_op(ReduceOp::Sum, DType::Bool, "allreduce"), nccl::kMax);
  EXPECT_EQ(nccl::reduce_op(ReduceOp::Max, DType::Bool, "allreduce"), nccl::kMax);
  EXPECT_EQ(nccl::reduce_op(ReduceOp::Min, DType::Bool, "allreduce"), nccl::kMin);
  try {
    nccl::reduce_op(ReduceOp::Avg, DType::Bool, "reduce_scatter");
    FAIL() << "avg of bool accepted";
  } catch (const DistributedError &e) {
    EXPECT_EQ(e.kind(), DistributedError::Kind::Invalid);
    EXPECT_STREQ(e.what(), "reduce_scatter: avg of bool is not defined");
  }
#ifdef KILN_TEST_HAVE_NCCL_H
  EXPECT_EQ(nccl::kSum, ncclSum);
  EXPECT_EQ(nccl::kProd, ncclProd);
  EXPECT_EQ(nccl::kMax, ncclMax);
  EXPECT_EQ(nccl::kMin, ncclMin);
  EXPECT_EQ(nccl::kAvg, ncclAvg);
#endif
}

TEST(NcclAvailability, AMissingLibraryIsNamedWithTheLoadersMessage) {
  const auto missing = cuda::load_nccl_library({"libnccl-kiln-missing.so.2"});
  ASSERT_FALSE(missing.loaded());
  const std::string why = nccl::unavailable_reason(missing);
  EXPECT_TRUE(contains(why, "NCCL is not available: cannot load libnccl-kiln-missing.so.2 (")) << why;
  EXPECT_TRUE(contains(why, "cannot open shared object file")) << why;
}

TEST(NcclAvailability, TheSimulatorIsRefusedWithAPointerToGloo) {
  const char *old = std::getenv("KILN_CUDA_SIM");
  const std::string saved = old ? old : "";
  ::setenv("KILN_CUDA_SIM", "1", 1);
  const std::string why = nccl_unavailable_reason();
  if (old) ::setenv("KILN_CUDA_SIM", saved.c_str(), 1);
  else ::unsetenv("KILN_CUDA_SIM");
  if (!cuda::nccl_library().loaded()) GTEST_SKIP() << cuda::nccl_library().error;
  EXPECT_TRUE(contains(why, "NCCL is not available: the CUDA device is the CUDA-on-CPU simulator")) << why;
  EXPECT_TRUE(contains(why, "use the gloo backend")) << why;
}

TEST(NcclProcessGroup, WithoutAGpuCreationThrowsNcclIsNotAvailableWithCudasReason) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present (this checks the error without one)";
  // The library itself loads here (the toolkit ships it): the reason is CUDA's.
  ASSERT_TRUE(cuda::nccl_library().loaded()) << cuda::nccl_library().error;
  EXPECT_EQ(nccl_unavailable_reason(), "NCCL is not available: " + cuda::availability_reason());
  auto store = std::make_shared<HashStore>();
  try {
    make_nccl_process_group(store, 0, 1);
    FAIL() << "made an NCCL group without a GPU";
  } catch (const DistributedError &e) {
    EXPECT_EQ(e.kind(), DistributedError::Kind::Invalid);
    EXPECT_TRUE(contains(e.what(), "init_process_group (nccl): rank 0 of 1: NCCL is not available: ")) << e.what();
    EXPECT_TRUE(contains(e.what(), cuda::availability_reason())) << e.what();
  }
}

TEST(NcclProcessGroup, ARankOutsideTheGroupIsInvalidBeforeAnythingLoads) {
  auto store = std::make_shared<HashStore>();
  for (auto [rank, size] : {std::pair{2, 2}, std::pair{-1, 1}, std::pair{0, 0}}) {
    try {
      make_nccl_process_group(store, rank, size);
      FAIL() << rank << " of " << size;
    } catch (const DistributedError &e) {
      EXPECT_EQ(e.kind(), DistributedError::Kind::Invalid);
      EXPECT_TRUE(contains(e.what(), "rank " + std::to_string(rank) + " is not in a group of size " +
                                         std::to_string(size)))
          << e.what();
    }
  }
}

// ---- on a GPU ------------------------------------------------------------------

/// Skips naming why NCCL cannot run here; on the GPU machine
/// (KILN_TEST_REAL_CUDA=1, bench/gpu/run_checks.sh) that is a failure.
#define KILN_SKIP_WITHOUT_NCCL()                                                                                       \
  if (const std::string why = nccl_unavailable_reason(); !why.empty()) {                                               \
    if (std::getenv("KILN_TEST_REAL_CUDA")) FAIL() << "KILN_TEST_REAL_CUDA=1 but " << why;                            \
    GTEST_SKIP() << why;                                                                                               \
  }

/// A one-rank group on cuda:0, or a skip naming why there is none.
#define KILN_NCCL_GROUP_OR_SKIP(pg)                                                                                    \
  KILN_SKIP_WITHOUT_NCCL();                                                                                            \
  auto pg = make_nccl_process_group(std::make_shared<HashStore>(), 0, 1, [] {                                          \
    NcclOptions o;                                                                                                     \
    o.timeout = 60s;                                                                                                   \
    return o;                                                                                                          \
  }())

DeviceBackend &cuda_backend() { return *find_backend(DeviceType::CUDA); }

TensorView cuda_view(DType t, int64_t n) {
  auto buf = Buffer::make(static_cast<size_t>(n) * itemsize(t), cuda_backend().allocator(0));
  return TensorView{buf, 0, {n}, {1}, t};
}

template <class T> TensorView cuda_from(const std::vector<T> &host, DType t) {
  auto v = cuda_view(t, static_cast<int64_t>(host.size()));
  cuda_backend().copy(v.data(), Device(DeviceType::CUDA, 0), host.data(), kCPU, host.size() * sizeof(T));
  return v;
}

template <class T> std::vector<T> to_host(const TensorView &v) {
  std::vector<T> host(static_cast<size_t>(v.numel()));
  cuda_backend().copy(host.data(), kCPU, v.data(), Device(DeviceType::CUDA, 0), host.size() * sizeof(T));
  return host;
}

TEST(NcclProcessGroup, OneRankAllreduceOfACudaTensorKeepsItsValue) {
  KILN_NCCL_GROUP_OR_SKIP(pg);
  EXPECT_EQ(pg->backend_name(), "nccl");
  std::vector<float> x(4097);
  std::iota(x.begin(), x.end(), -2048.0f);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    auto t = cuda_from(x, DType::Float32);
    auto work = pg->allreduce(t, op);
    work->wait();
    EXPECT_TRUE(work->is_completed());
    EXPECT_EQ(to_host<float>(t), x) << reduce_op_name(op);
  }
  std::vector<int64_t> i(1000);
  std::iota(i.begin(), i.end(), int64_t{1} << 40);
  auto ti = cuda_from(i, DType::Int64);
  pg->allreduce(ti, ReduceOp::Sum)->wait();
  EXPECT_EQ(to_host<int64_t>(ti), i);
}

TEST(NcclProcessGroup, OneRankBroadcastAllgatherReduceScatterBarrierOnACreatedStream) {
  KILN_NCCL_GROUP_OR_SKIP(pg);
  auto *api = cuda::device_api(0);
  const cuda::StreamHandle side = api->stream_create();
  {
    cuda::StreamGuard guard(0, side); // the collectives run on the current stream
    std::vector<double> x{1.5, -2.25, 3.0};
    auto b = cuda_from(x, DType::Float64);
    pg->broadcast(b, 0)->wait();
    EXPECT_EQ(to_host<double>(b), x);
    std::vector<int32_t> y{7, 8, 9, 10};
    auto in = cuda_from(y, DType::Int32);
    std::vector<TensorView> outs{cuda_view(DType::Int32, 4)};
    pg->allgather(outs, in)->wait();
    EXPECT_EQ(to_host<int32_t>(outs[0]), y);
    auto rs_out = cuda_view(DType::Int32, 4);
    pg->reduce_scatter(rs_out, {in}, ReduceOp::Sum)->wait();
    EXPECT_EQ(to_host<int32_t>(rs_out), y);
    pg->barrier()->wait();
  }
  api->stream_destroy(side);
}

TEST(NcclProcessGroup, ACpuTensorOrABoolAverageIsInvalidAtTheCall) {
  KILN_NCCL_GROUP_OR_SKIP(pg);
  TensorView cpu{Buffer::make(16), 0, {4}, {1}, DType::Float32};
  try {
    pg->allreduce(cpu, ReduceOp::Sum);
    FAIL() << "a CPU tensor accepted";
  } catch (const DistributedError &e) {
    EXPECT_EQ(e.kind(), DistributedError::Kind::Invalid);
    EXPECT_TRUE(contains(e.what(), "allreduce: a tensor on cpu (expected cuda:0")) << e.what();
  }
  auto flags = cuda_view(DType::Bool, 8);
  EXPECT_THROW(pg->allreduce(flags, ReduceOp::Avg), DistributedError);
  // The group still works after rejected calls.
  std::vector<float> one{42.0f};
  auto t = cuda_from(one, DType::Float32);
  pg->allreduce(t, ReduceOp::Sum)->wait();
  EXPECT_EQ(to_host<float>(t), one);
}

TEST(NcclProcessGroup, TwoGroupsOnOneStoreEachGetTheirOwnUniqueId) {
  KILN_SKIP_WITHOUT_NCCL();
  auto store = std::make_shared<HashStore>();
  auto first = make_nccl_process_group(store, 0, 1);
  auto second = make_nccl_process_group(store, 0, 1);
  EXPECT_TRUE(store->check({"kiln_nccl_unique_id/0", "kiln_nccl_unique_id/1"}));
  std::vector<float> x{1, 2, 3};
  auto t = cuda_from(x, DType::Float32);
  first->allreduce(t, ReduceOp::Sum)->wait();
  second->allreduce(t, ReduceOp::Max)->wait();
  EXPECT_EQ(to_host<float>(t), x);
}

} // namespace
} // namespace kiln::runtime::distributed
