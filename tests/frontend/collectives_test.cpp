// The collectives through kiln::distributed (all_reduce, broadcast,
// all_gather, barrier) across real processes on loopback (the harness:
// distributed_ranks.h), CUDA tensors on Gloo, the backends' errors, and
// DistributedSampler.
#include <cstdlib>
#include <set>

#include <gtest/gtest.h>

#include "distributed_ranks.h"
#include "kiln/runtime/distributed/ProcessGroup.h" // HashStore, nccl_unavailable_reason (the CUDA block)

namespace kiln::distributed_test {
namespace {

/// all_reduce, broadcast from the last rank, all_gather and barrier: 0 when
/// every result is the one computed by hand.
int collectives_rank(int rank, int world) {
  Tensor t = full({3}, double(rank + 1), kFloat32);
  dist::all_reduce(t, dist::ReduceOp::Sum);
  const float expected = float(world * (world + 1) / 2);
  if (t.data_ptr<float>()[2] != expected)
    return 1;
  Tensor b = full({2}, double(rank), kInt64);
  dist::broadcast(b, world - 1);
  if (b.data_ptr<int64_t>()[0] != world - 1)
    return 2;
  std::vector<Tensor> all;
  dist::all_gather(all, full({1}, double(rank * 10), kFloat64));
  for (int r = 0; r < world; ++r)
    if (all[r].data_ptr<double>()[0] != r * 10)
      return 3;
  dist::barrier();
  return 0;
}

// ---- CUDA tensors on Gloo (the CUDA-on-CPU simulator) ------------------------
// Gloo stages CUDA tensors through pinned host memory
// (runtime/src/distributed/HostStaging.h): through the frontend, the
// collectives on cuda:0 equal the same collectives on the CPU, across
// processes. DDP on a cuda:0 model: ddp_cuda_test.cpp.

/// 0 when the cuda:0 collectives equal their CPU results.
int cuda_sim_rank(int rank, int world) {
  ::setenv("KILN_CUDA_SIM", "1", 1); // before the first CUDA tensor of this rank
  const Device cuda0(DeviceType::CUDA, 0);
  Tensor cpu_sum = full({5}, double(rank) + 0.5, kFloat32), cuda_sum = cpu_sum.to(cuda0);
  dist::all_reduce(cpu_sum, dist::ReduceOp::Sum);
  dist::all_reduce(cuda_sum, dist::ReduceOp::Sum);
  if (cuda_sum.device() != cuda0 || cuda_sum.cpu().to_vector<float>() != cpu_sum.to_vector<float>())
    return 11;
  Tensor cpu_b = full({3}, double(rank * 7), kInt64), cuda_b = cpu_b.to(cuda0);
  dist::broadcast(cpu_b, world - 1);
  dist::broadcast(cuda_b, world - 1);
  if (cuda_b.cpu().to_vector<int64_t>() != cpu_b.to_vector<int64_t>())
    return 12;
  return 0;
}

const bool registered = register_rank_cases({{"collectives", collectives_rank}, {"cuda_sim", cuda_sim_rank}});

TEST(DistributedDataParallel, CollectivesOnTensors) { EXPECT_EQ(run_ranks("collectives", 3), std::vector<int>(3, 0)); }

TEST(DistributedDataParallel, CudaTensorCollectivesOnGlooEqualTheCpuResultsOnTheSimulator) {
  EXPECT_EQ(run_ranks("cuda_sim", 3, 120s), std::vector<int>(3, 0));
}
TEST(DistributedDataParallel, BackendNcclWithoutAGpuIsAClearErrorAndAnUnknownBackendIsNamed) {
  auto store = std::make_shared<runtime::distributed::HashStore>();
  try {
    dist::init_process_group(store, 0, 1, 5s, "mpi");
    FAIL() << "backend mpi accepted";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("backend 'mpi' is not available (expected 'gloo' or 'nccl')"),
              std::string::npos)
        << e.what();
  }
  const std::string why = runtime::distributed::nccl_unavailable_reason();
  if (why.empty())
    GTEST_SKIP() << "NCCL can run here (this checks the error without it)";
  try {
    dist::init_process_group(store, 0, 1, 5s, "nccl");
    FAIL() << "an NCCL group without NCCL";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  EXPECT_FALSE(dist::is_initialized());
}
// ---- end of CUDA tensors on Gloo ---------------------------------------------

TEST(DistributedSampler, ShardsAreDisjointCoverTheDataAndAreEqualInSize) {
  for (bool drop_last : {false, true})
    for (int world : {1, 2, 3, 4}) {
      std::multiset<int64_t> seen;
      for (int r = 0; r < world; ++r) {
        dist::DistributedSampler s(10, world, r, /*shuffle=*/true, /*seed=*/3, drop_last);
        s.set_epoch(2);
        auto idx = s.indices();
        EXPECT_EQ(static_cast<int64_t>(idx.size()), s.num_samples());
        EXPECT_EQ(s.num_samples(), drop_last ? 10 / world : (10 + world - 1) / world);
        seen.insert(idx.begin(), idx.end());
      }
      const size_t total = seen.size();
      std::set<int64_t> distinct(seen.begin(), seen.end());
      if (drop_last) {
        EXPECT_EQ(distinct.size(), total) << "disjoint";
      } else {
        EXPECT_EQ(distinct.size(), 10u) << "covers every sample";
        EXPECT_LE(total - 10, static_cast<size_t>(world - 1)) << "padding only to a multiple of the world size";
      }
    }
  dist::DistributedSampler a(10, 2, 0, true, 3), b(10, 2, 0, true, 3);
  b.set_epoch(1);
  EXPECT_NE(a.indices(), b.indices()) << "set_epoch reshuffles";
  EXPECT_THROW(dist::DistributedSampler(10, 2, 2), Error);
  auto data = std::make_shared<data::TensorDataset>(arange(10).to(kFloat32).view({10, 1}), arange(10));
  auto shard = a.shard(data);
  ASSERT_EQ(shard->size(), 5);
  EXPECT_EQ(shard->get(1).target.data_ptr<int64_t>()[0], a.indices()[1]);
}

} // namespace
} // namespace kiln::distributed_test
