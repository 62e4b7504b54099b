// DistributedDataParallel on a CUDA model: the reducer's buckets and
// bookkeeping tensors on the parameters' device. Here the device is the
// CUDA-on-CPU simulator (KILN_CUDA_SIM=1) and the group Gloo (CUDA tensors
// staged through pinned host memory); ranks are processes started by the
// distributed tests' harness (distributed_ranks.h: the cases below register
// as "cuda_*"). On a GPU (bench/gpu/run_checks.sh, KILN_TEST_REAL_CUDA=1)
// the NCCL case runs for real; without one it skips with NCCL's reason.
//
// The reference, independent of the CUDA path and of the reducer: one
// process training a CPU copy of the model on the global batch.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "distributed_ranks.h"
#include "kiln/kiln.h"
#include "kiln/runtime/distributed/ProcessGroup.h" // nccl_unavailable_reason

namespace kiln::distributed_test {
namespace {

bool real_cuda() { return std::getenv("KILN_TEST_REAL_CUDA") != nullptr; }

/// This rank's CUDA device: cuda:(rank % devices) on a GPU, the simulator's
/// cuda:0 (one simulator per process) here. Selects the simulator on first
/// use, before the rank's first CUDA tensor.
Device rank_device(int rank) {
  if (!real_cuda())
    ::setenv("KILN_CUDA_SIM", "1", 1);
  return Device(DeviceType::CUDA, real_cuda() ? rank % std::max(1, kiln::cuda::device_count()) : 0);
}

/// The relative tolerance against the cpu: 1e-5 on the simulator (its GEMM
/// is the cpu's; the pointwise kernels round as the cpu); 1e-4 on a GPU,
/// whose GEMMs sum in another order.
double tolerance() { return real_cuda() ? 1e-4 : 1e-5; }

/// This rank's case: its CUDA device and the tolerance; `compile`: DDP wraps
/// kiln::compile(model, *compile) (the CUDA target's kernels, the gradients
/// reaching the reducer from the compiled backward).
DdpCase cuda_case(int rank, const CompileOptions *compile = nullptr) { return {rank_device(rank), tolerance(), compile}; }

/// KILN_DISTRIBUTED_DEBUG=DETAIL with rank 1 alone compressing its CUDA
/// buckets to bfloat16: the one bucket's all-reduce (212 elements) is a
/// desync (float32 vs bfloat16 elements), reported on every rank as a
/// kiln::Error naming both collectives instead of a hang or garbage.
int desync(int rank) {
  const Device device = rank_device(rank);
  auto model = make_model();
  model->to(device);
  dist::DDPOptions o;
  if (rank == 1)
    o.comm_hook = "bf16_compress";
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model, o);
  auto [x, y] = batch(0);
  try {
    nn::functional::mse_loss(ddp->forward(rows_of(x, rank, 2, device)), rows_of(y, rank, 2, device)).backward();
    return fail(1, "rank %d: no error", rank);
  } catch (const Error &e) {
    const std::string what = e.what();
    const bool named =
        what.find("collective desync (KILN_DISTRIBUTED_DEBUG=DETAIL): rank 0 runs allreduce") != std::string::npos &&
        what.find("(float32, 212 elements) but rank 1 runs allreduce") != std::string::npos &&
        what.find("(bfloat16, 212 elements)") != std::string::npos;
    return named ? 0 : fail(2, "rank %d: unexpected error: %s", rank, e.what());
  }
}

/// Parameters on two devices: a kiln::Error naming both (one rank).
int mixed_devices(int rank) {
  auto model = std::make_shared<TwoHeads>();
  model->unused->to(rank_device(rank));
  try {
    dist::DistributedDataParallel ddp(model);
    return 1;
  } catch (const Error &e) {
    const std::string what = e.what();
    const std::string expected = "DistributedDataParallel: parameter 'unused.weight' [4, 8] float32 is on cuda:0 but "
                                 "parameter 'used.weight' [4, 8] float32 is on cpu (expected every parameter on one "
                                 "device";
    return what.find(expected) != std::string::npos ? 0 : fail(2, "unexpected error: %s", e.what());
  }
}

dist::DDPOptions bucket_views(bool one_per_parameter) {
  dist::DDPOptions o;
  if (one_per_parameter)
    o.first_bucket_cap_mb = o.bucket_cap_mb = 0.0001; // one bucket per parameter: the rebuild and launch order
  o.gradient_as_bucket_view = true;
  return o;
}

const bool registered = register_rank_cases({
    {"cuda_equal", [](int rank, int world) { return ddp_train_and_compare(rank, world, false, {}, cuda_case(rank)); }},
    {"cuda_bucket_views",
     [](int rank, int world) { return ddp_train_and_compare(rank, world, false, bucket_views(false), cuda_case(rank)); }},
    {"cuda_small_bucket_views",
     [](int rank, int world) { return ddp_train_and_compare(rank, world, false, bucket_views(true), cuda_case(rank)); }},
    {"cuda_no_sync", [](int rank, int world) { return ddp_train_and_compare(rank, world, true, {}, cuda_case(rank)); }},
    {"cuda_compiled",
     [](int rank, int world) {
       static const CompileOptions o;
       return ddp_train_and_compare(rank, world, false, {}, cuda_case(rank, &o));
     }},
    {"cuda_compiled_no_sync",
     [](int rank, int world) {
       static const CompileOptions o;
       return ddp_train_and_compare(rank, world, true, {}, cuda_case(rank, &o));
     }},
    {"cuda_unused", [](int rank, int world) { return ddp_unused_head(rank, world, cuda_case(rank)); }},
    {"cuda_bf16", [](int rank, int world) { return ddp_bf16_hook(rank, world, cuda_case(rank)); }},
    {"cuda_mixed", [](int rank, int) { return mixed_devices(rank); }},
    {"cuda_desync", [](int rank, int) { return desync(rank); }},
});

/// The ranks' environment: the simulator's kernels are slow under a loaded
/// CI machine, so the group waits 60 s; `extra` on top.
std::vector<std::pair<std::string, std::string>> cuda_env(std::vector<std::pair<std::string, std::string>> extra = {}) {
  extra.insert(extra.begin(), {"KILN_DISTRIBUTED_TIMEOUT_S", "60"});
  return extra;
}

/// The Gloo tests run on the simulator (a GPU run of this binary does the
/// NCCL test only: bench/gpu/run_checks.sh filters).
TEST(DDPCuda, EagerTwentyStepsOnTwoAndThreeRanksEqualOneCpuProcessOnTheGlobalBatch) {
  for (int world : {2, 3})
    EXPECT_EQ(run_ranks("cuda_equal", world, 180s, cuda_env()), std::vector<int>(world, 0)) << world << " ranks";
}

/// DDP around kiln::compile of a CUDA model: the CUDA target's kernels (and
/// CUDA graphs, on by default for static shapes) with the reducer fed from
/// the compiled backward; 20 steps equal one cpu process on the global batch,
/// also with no_sync accumulation.
TEST(DDPCuda, CompiledTwentyStepsOnTwoRanksEqualOneCpuProcessOnTheGlobalBatch) {
  EXPECT_EQ(run_ranks("cuda_compiled", 2, 180s, cuda_env()), std::vector<int>(2, 0));
  EXPECT_EQ(run_ranks("cuda_compiled_no_sync", 2, 180s, cuda_env()), std::vector<int>(2, 0));
}

TEST(DDPCuda, GradientsAsBucketViewsInOneBucketAndInOneBucketPerParameter) {
  EXPECT_EQ(run_ranks("cuda_bucket_views", 2, 180s, cuda_env()), std::vector<int>(2, 0));
  EXPECT_EQ(run_ranks("cuda_small_bucket_views", 2, 180s, cuda_env()), std::vector<int>(2, 0));
}

TEST(DDPCuda, NoSyncAccumulationEqualsTheLargeBatch) { EXPECT_EQ(run_ranks("cuda_no_sync", 2, 180s, cuda_env()), std::vector<int>(2, 0)); }

TEST(DDPCuda, FindUnusedParametersAndTheBf16CompressionHook) {
  EXPECT_EQ(run_ranks("cuda_unused", 2, 180s, cuda_env()), std::vector<int>(2, 0));
  EXPECT_EQ(run_ranks("cuda_bf16", 2, 180s, cuda_env()), std::vector<int>(2, 0));
}

/// KILN_DISTRIBUTED_DEBUG=DETAIL: every collective's fingerprint compared
/// across ranks (the model check's gathers, the rebuilt order's broadcast,
/// the CUDA buckets) and the run still equals the single process.
TEST(DDPCuda, DebugModeFingerprintsEveryCollective) {
  EXPECT_EQ(run_ranks("cuda_equal", 2, 180s, cuda_env({{"KILN_DISTRIBUTED_DEBUG", "DETAIL"}})), std::vector<int>(2, 0));
}

TEST(DDPCuda, DebugModeReportsADesyncOfTheCudaBucketsOnEveryRank) {
  EXPECT_EQ(run_ranks("cuda_desync", 2, 180s, cuda_env({{"KILN_DISTRIBUTED_DEBUG", "DETAIL"}})), std::vector<int>(2, 0));
}

TEST(DDPCuda, ParametersOnTwoDevicesAreAnErrorNamingBoth) { EXPECT_EQ(run_ranks("cuda_mixed", 1, 180s, cuda_env()), std::vector<int>{0}); }

/// Backend "nccl" on the GPU: one rank per GPU, at most 2 (one H200: one
/// rank; NCCL rejects two ranks of one communicator on the same GPU,
/// "Duplicate GPU detected"); then again with KILN_DISTRIBUTED_DEBUG=DETAIL,
/// every collective's fingerprint all-gathered through device memory first
/// (NcclOptions::check_fingerprints, exercised on one rank too). Skips
/// without NCCL and a GPU, with the reason; on the device script
/// (KILN_TEST_REAL_CUDA=1) that is a failure.
TEST(DDPCuda, NcclOnTheGpuEqualsOneCpuProcessOnTheGlobalBatch) {
  const std::string why = runtime::distributed::nccl_unavailable_reason();
  if (!why.empty()) {
    if (real_cuda())
      FAIL() << "KILN_TEST_REAL_CUDA=1 but " << why;
    GTEST_SKIP() << why;
  }
  const int world = std::min(2, kiln::cuda::device_count());
  EXPECT_EQ(run_ranks("cuda_equal", world, 180s, cuda_env({{"KILN_DDP_TEST_BACKEND", "nccl"}})), std::vector<int>(world, 0)) << world << " ranks";
  EXPECT_EQ(run_ranks("cuda_equal", world, 180s, cuda_env({{"KILN_DDP_TEST_BACKEND", "nccl"}, {"KILN_DISTRIBUTED_DEBUG", "DETAIL"}})), std::vector<int>(world, 0))
      << world << " ranks, fingerprints checked";
}

} // namespace
} // namespace kiln::distributed_test
