// The static performance model (kiln/codegen/PerfModel.h): occupancy and
// roofline against their closed forms, worked by hand for sm_90's limits
// (65536 registers/SM in 256-register warp units, 64 warps, 32 blocks,
// 228 KiB shared/SM, 1 KiB reserved per block).
#include <gtest/gtest.h>

#include "kiln/codegen/PerfModel.h"

namespace kiln::codegen::perf {
namespace {

// 256 threads = 8 warps. 32 registers: 32 x 32 = 1024 per warp (4 units),
// 65536 / 1024 = 64 warps -> 8 blocks; warps: 64 / 8 = 8 blocks. 8 x 8 = 64
// warps of 64: 100%.
TEST(PerfModel, ThirtyTwoRegistersAt256ThreadsFillTheSm) {
  const Occupancy o = occupancy(32, 256, 0);
  EXPECT_EQ(o.by_warps, 8);
  EXPECT_EQ(o.by_registers, 8);
  EXPECT_EQ(o.blocks_per_sm, 8);
  EXPECT_EQ(o.active_warps, 64);
  EXPECT_DOUBLE_EQ(o.fraction, 1.0);
  EXPECT_EQ(o.limit, OccupancyLimit::Warps);
}

// 128 registers: 4096 per warp, 65536 / 4096 = 16 warps -> 2 blocks of 8
// warps: 16 / 64 = 25%, limited by registers.
TEST(PerfModel, OneHundredTwentyEightRegistersAt256ThreadsGiveAQuarter) {
  const Occupancy o = occupancy(128, 256, 0);
  EXPECT_EQ(o.by_registers, 2);
  EXPECT_EQ(o.blocks_per_sm, 2);
  EXPECT_DOUBLE_EQ(o.fraction, 0.25);
  EXPECT_EQ(o.limit, OccupancyLimit::Registers);
}

// Registers round up to the 256-register warp unit: 33 x 32 = 1056 -> 1280
// per warp, 65536 / 1280 = 51 warps -> 6 blocks of 8 (48 warps, 75%).
TEST(PerfModel, RegistersRoundUpToTheWarpAllocationUnit) {
  const Occupancy o = occupancy(33, 256, 0);
  EXPECT_EQ(o.by_registers, 6);
  EXPECT_DOUBLE_EQ(o.fraction, 0.75);
}

// 128 threads = 4 warps, 32 registers (16 blocks by warps and registers),
// 48 KiB shared + 1 KiB reserved = 49 KiB: 228 / 49 = 4 blocks -> 16 warps,
// 25%, limited by shared memory.
TEST(PerfModel, SharedMemoryLimitsBlocks) {
  const Occupancy o = occupancy(32, 128, 48 * 1024);
  EXPECT_EQ(o.by_warps, 16);
  EXPECT_EQ(o.by_registers, 16);
  EXPECT_EQ(o.by_shared, 4);
  EXPECT_EQ(o.blocks_per_sm, 4);
  EXPECT_DOUBLE_EQ(o.fraction, 0.25);
  EXPECT_EQ(o.limit, OccupancyLimit::SharedMemory);
}

// 32 threads (1 warp), few registers: 64 blocks by warps, capped at 32
// blocks per SM -> 32 warps, 50%.
TEST(PerfModel, SmallBlocksHitTheBlockCap) {
  const Occupancy o = occupancy(16, 32, 0);
  EXPECT_EQ(o.blocks_per_sm, 32);
  EXPECT_DOUBLE_EQ(o.fraction, 0.5);
  EXPECT_EQ(o.limit, OccupancyLimit::Blocks);
}

TEST(PerfModel, OverLimitBlocksCannotLaunch) {
  EXPECT_EQ(occupancy(32, 256, 228 * 1024).limit, OccupancyLimit::Launch); // over 227 KiB per block
  EXPECT_EQ(occupancy(32, 2048, 0).blocks_per_sm, 0);                      // over 1024 threads
  EXPECT_EQ(occupancy(256, 256, 0).blocks_per_sm, 0);                      // over 255 registers
}

// Pointwise add of n float32: 8n bytes read, 4n written, n FLOPs; AI 1/12,
// memory-bound, 12n / 4.8e12 s. A 1024^3 GEMM (2 x 1024^3 FLOPs, 12 MiB
// once, AI 170.7 FLOP/B) is compute-bound at the fp32 peak (ridge 66.9e12 /
// 4.8e12 = 13.9 FLOP/B) and memory-bound at the bf16 tensor peak (ridge
// 989.5e12 / 4.8e12 = 206 FLOP/B).
TEST(PerfModel, RooflineOfAPointwiseAddAndAGemm) {
  const int64_t n = 1 << 20;
  KernelPerf add;
  add.bytes_read = 8 * n;
  add.bytes_written = 4 * n;
  add.flops = n;
  add.finish();
  EXPECT_DOUBLE_EQ(add.roofline_seconds, 12.0 * n / 4.8e12);
  EXPECT_DOUBLE_EQ(add.arithmetic_intensity, 1.0 / 12.0);
  EXPECT_FALSE(add.compute_bound);

  KernelPerf gemm;
  gemm.kind = "gemm";
  gemm.bytes_read = 2 * 4 * 1024 * 1024;
  gemm.bytes_written = 4 * 1024 * 1024;
  gemm.flops = 2LL * 1024 * 1024 * 1024;
  gemm.finish();
  EXPECT_TRUE(gemm.compute_bound);
  EXPECT_DOUBLE_EQ(gemm.roofline_seconds, 2.0 * 1024 * 1024 * 1024 / 66.9e12);
  gemm.rate = FlopRate::Tensor16;
  gemm.finish();
  EXPECT_FALSE(gemm.compute_bound);
  EXPECT_DOUBLE_EQ(gemm.roofline_seconds, 12.0 * 1024 * 1024 / 4.8e12);
  EXPECT_DOUBLE_EQ(rooflineSeconds(100, 0, 1.0, 100.0), 1.0);
}

TEST(PerfModel, ReportLineShowsPtxasAndOccupancy) {
  KernelPerf k;
  k.name = "fusion_0";
  k.kind = "pointwise";
  k.block_threads = 256;
  k.grid_blocks = 4;
  k.bytes_read = 8192;
  k.bytes_written = 4096;
  k.flops = 1024;
  k.has_ptxas = true;
  k.registers = 32;
  k.finish();
  const std::string line = formatKernelPerf(k);
  EXPECT_NE(line.find("fusion_0 [pointwise, 256 threads x 4 blocks]: reads 8192 B, writes 4096 B, 1024 FLOPs"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("memory-bound, roofline " + formatSeconds(12288 / 4.8e12) + " s"), std::string::npos) << line;
  EXPECT_NE(line.find("32 registers, 0 spill bytes, 0 B shared, occupancy 100% (8 blocks/SM, warps)"),
            std::string::npos)
      << line;
  k.has_ptxas = false;
  k.ptxas_note = "n/a (no NVRTC)";
  EXPECT_NE(formatKernelPerf(k).find("ptxas: n/a (no NVRTC)"), std::string::npos);
}

} // namespace
} // namespace kiln::codegen::perf
