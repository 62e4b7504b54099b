// The static performance model of kiln/codegen/PerfModel.h (occupancy and
// roofline; the formulas and their sources are in the header).
#include "kiln/codegen/PerfModel.h"

#include <algorithm>
#include <cstdio>

namespace kiln::codegen::perf {

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t roundUp(int64_t a, int64_t unit) { return ceilDiv(a, unit) * unit; }

} // namespace

const char *limitName(OccupancyLimit limit) {
  switch (limit) {
  case OccupancyLimit::Warps:
    return "warps";
  case OccupancyLimit::Registers:
    return "registers";
  case OccupancyLimit::SharedMemory:
    return "shared memory";
  case OccupancyLimit::Blocks:
    return "blocks";
  case OccupancyLimit::Launch:
    return "cannot launch";
  }
  return "?";
}

Occupancy occupancy(int64_t registers_per_thread, int64_t threads_per_block, int64_t shared_bytes_per_block,
                    const SmLimits &limits) {
  Occupancy o;
  if (threads_per_block <= 0 || threads_per_block > limits.threads_per_block ||
      registers_per_thread > limits.max_registers_per_thread ||
      shared_bytes_per_block > limits.shared_bytes_per_block) {
    o.limit = OccupancyLimit::Launch;
    return o;
  }
  const int64_t warps_per_block = ceilDiv(threads_per_block, limits.warp_size);
  o.by_warps = std::min(limits.warps_per_sm, limits.threads_per_sm / limits.warp_size) / warps_per_block;
  o.by_registers = limits.blocks_per_sm; // 0 registers (unknown): no register limit
  if (registers_per_thread > 0) {
    const int64_t per_warp = roundUp(registers_per_thread * limits.warp_size, limits.register_unit_per_warp);
    o.by_registers = (limits.registers_per_sm / per_warp) / warps_per_block;
  }
  const int64_t shared =
      roundUp(std::max<int64_t>(0, shared_bytes_per_block), limits.shared_unit) + limits.shared_reserved_per_block;
  o.by_shared = limits.shared_bytes_per_sm / shared;
  o.blocks_per_sm = std::min({o.by_warps, o.by_registers, o.by_shared, limits.blocks_per_sm});
  if (o.blocks_per_sm == o.by_warps)
    o.limit = OccupancyLimit::Warps;
  else if (o.blocks_per_sm == o.by_registers)
    o.limit = OccupancyLimit::Registers;
  else if (o.blocks_per_sm == o.by_shared)
    o.limit = OccupancyLimit::SharedMemory;
  else
    o.limit = OccupancyLimit::Blocks;
  o.active_warps = o.blocks_per_sm * warps_per_block;
  o.fraction = static_cast<double>(o.active_warps) / static_cast<double>(limits.warps_per_sm);
  return o;
}

const char *rateName(FlopRate rate) {
  switch (rate) {
  case FlopRate::Fp32:
    return "fp32";
  case FlopRate::Tf32:
    return "tf32";
  case FlopRate::Tensor16:
    return "bf16/f16 tensor";
  }
  return "?";
}

double peakFlopsPerSecond(FlopRate rate, const DeviceSpeed &speed) {
  switch (rate) {
  case FlopRate::Fp32:
    return speed.fp32_flops_per_second;
  case FlopRate::Tf32:
    return speed.tf32_flops_per_second;
  case FlopRate::Tensor16:
    return speed.tensor16_flops_per_second;
  }
  return speed.fp32_flops_per_second;
}

double rooflineSeconds(int64_t bytes, int64_t flops, double flops_per_second, double bytes_per_second) {
  return std::max(static_cast<double>(bytes) / bytes_per_second, static_cast<double>(flops) / flops_per_second);
}

void KernelPerf::finish(const DeviceSpeed &speed, const SmLimits &limits) {
  const double peak = peakFlopsPerSecond(rate, speed);
  roofline_seconds = rooflineSeconds(bytes(), flops, peak, speed.bytes_per_second);
  arithmetic_intensity = bytes() > 0 ? static_cast<double>(flops) / static_cast<double>(bytes()) : 0.0;
  compute_bound = static_cast<double>(flops) / peak > static_cast<double>(bytes()) / speed.bytes_per_second;
  occupancy = Occupancy{};
  if (has_ptxas && block_threads > 0)
    occupancy = perf::occupancy(registers, block_threads, shared_bytes, limits);
}

std::string formatSeconds(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", seconds);
  return buf;
}

std::string formatKernelPerf(const KernelPerf &k) {
  std::string s = k.name + " [" + k.kind;
  if (k.block_threads > 0) {
    s += ", " + std::to_string(k.block_threads) + " threads";
    if (k.grid_blocks > 0)
      s += " x " + std::to_string(k.grid_blocks) + " blocks";
  }
  char ai[32];
  std::snprintf(ai, sizeof ai, "%.3g", k.arithmetic_intensity);
  s += "]: reads " + std::to_string(k.bytes_read) + " B, writes " + std::to_string(k.bytes_written) + " B, " +
       std::to_string(k.flops) + " FLOPs (" + rateName(k.rate) + "), AI " + ai + " FLOP/B, " +
       (k.compute_bound ? "compute-bound" : "memory-bound") + ", roofline " + formatSeconds(k.roofline_seconds) +
       " s; ";
  if (!k.has_ptxas)
    return s + "ptxas: " + k.ptxas_note;
  s += std::to_string(k.registers) + " registers, " + std::to_string(k.spill_bytes) + " spill bytes, " +
       std::to_string(k.shared_bytes) + " B shared";
  if (k.block_threads > 0) {
    char occ[96];
    std::snprintf(occ, sizeof occ, ", occupancy %.0f%% (%lld blocks/SM, %s)", 100.0 * k.occupancy.fraction,
                  static_cast<long long>(k.occupancy.blocks_per_sm), limitName(k.occupancy.limit));
    s += occ;
  }
  return s;
}

} // namespace kiln::codegen::perf
