// kiln/codegen/PerfModel.h - a static performance model of one GPU kernel
// launch: occupancy from its registers, block size and shared memory, and
// its roofline time from its bytes and FLOPs. Plain C++ (no MLIR, no CUDA):
// kiln::explain's per-kernel report (codegen/cuda/PerfReport.cpp) and the
// device benchmarks (bench/gpu) share it.
//
//   using namespace kiln::codegen::perf;
//   Occupancy o = occupancy(/*registers=*/32, /*threads=*/256, /*shared=*/0);
//   o.blocks_per_sm == 8; o.fraction == 1.0;                  // 64 of 64 warps
//   double t = rooflineSeconds(12 * n, n, kH200.fp32_flops_per_second, kH200.bytes_per_second);
//
// Units: bytes, FLOPs (a multiply-add is 2), seconds, bytes/s, FLOP/s.
//
// Sources:
// - Occupancy: the CUDA Occupancy Calculator's formula (CUDA Toolkit,
//   tools/CUDA_Occupancy_Calculator.xls; the same rules as
//   cudaOccupancyMaxActiveBlocksPerMultiprocessor) with the limits of
//   compute capability 9.0 from the CUDA C++ Programming Guide's table
//   "Technical Specifications per Compute Capability": 65536 32-bit
//   registers per SM, allocated per warp in units of 256; 2048 threads,
//   64 warps and 32 blocks per SM; 228 KiB shared memory per SM, at most
//   227 KiB per block; 1 KiB of shared memory reserved by the system per
//   block; shared memory allocated in units of 128 bytes.
// - Roofline (Williams, Waterman, Patterson, CACM 2009): time = max(bytes /
//   bandwidth, FLOPs / peak). H200 SXM numbers from NVIDIA's H200 datasheet
//   (HBM3e 4.8 TB/s) and the H100 SXM figures of the Hopper whitepaper
//   (the same GH100 SM array): 989.5 TFLOP/s dense bf16/f16 tensor core,
//   494.7 TFLOP/s dense TF32, 66.9 TFLOP/s fp32 without tensor cores.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::codegen::perf {

/// An SM's resource limits (defaults: compute capability 9.0, H100/H200).
struct SmLimits {
  int64_t registers_per_sm = 65536;
  int64_t register_unit_per_warp = 256; ///< a warp's registers are allocated in multiples of this
  int64_t max_registers_per_thread = 255;
  int64_t threads_per_sm = 2048;
  int64_t warps_per_sm = 64;
  int64_t blocks_per_sm = 32;
  int64_t threads_per_block = 1024;
  int64_t warp_size = 32;
  int64_t shared_bytes_per_sm = 228 * 1024;
  int64_t shared_bytes_per_block = 227 * 1024; ///< the opt-in maximum per block
  int64_t shared_reserved_per_block = 1024;    ///< taken by the system for every resident block
  int64_t shared_unit = 128;                   ///< shared memory allocation granularity
  int64_t sm_count = 132;                      ///< H100/H200 SXM (for grid waves)
};
inline constexpr SmLimits kSm90{};
/// The arch the report compiles for with NVRTC (sm_90).
inline constexpr int kSm90Arch = 90;

/// What limits the resident blocks of a kernel on one SM.
enum class OccupancyLimit { Warps, Registers, SharedMemory, Blocks, Launch };
/// "warps", "registers", "shared memory", "blocks", "cannot launch".
const char *limitName(OccupancyLimit limit);

/// Resident blocks per SM and the fraction of the SM's warps they fill.
struct Occupancy {
  int64_t blocks_per_sm = 0; ///< min of the three limits below and the block cap
  int64_t by_warps = 0;      ///< floor(warps_per_sm / warps per block)
  int64_t by_registers = 0;  ///< floor(floor(registers_per_sm / registers per warp) / warps per block)
  int64_t by_shared = 0;     ///< floor(shared_bytes_per_sm / (shared per block, rounded, + reserved))
  int64_t active_warps = 0;  ///< blocks_per_sm x warps per block
  double fraction = 0.0;     ///< active_warps / warps_per_sm, in [0, 1]
  OccupancyLimit limit = OccupancyLimit::Warps; ///< the smallest limit (ties: warps, registers, shared, blocks)
};

/// The occupancy of a kernel using `registers_per_thread` (ptxas' "Used N
/// registers"; 0: unknown, not a limit), `threads_per_block` and
/// `shared_bytes_per_block` (static + dynamic, bytes). Closed form:
///   warps/block = ceil(threads / warp_size)
///   registers/warp = ceil(registers x warp_size / register_unit) x register_unit
///   blocks = min(blocks_per_sm, floor(warps_per_sm / warps/block),
///                floor(floor(registers_per_sm / registers/warp) / warps/block),
///                floor(shared_per_sm / (ceil(shared / shared_unit) x shared_unit + reserved)))
/// A block over threads_per_block or shared_bytes_per_block threads/bytes,
/// or a thread over max_registers_per_thread, cannot launch: 0 blocks,
/// limit Launch.
Occupancy occupancy(int64_t registers_per_thread, int64_t threads_per_block, int64_t shared_bytes_per_block,
                    const SmLimits &limits = kSm90);

/// A device's memory bandwidth and peak arithmetic rates.
struct DeviceSpeed {
  double bytes_per_second = 4.8e12;            ///< HBM3e, H200 SXM
  double tensor16_flops_per_second = 989.5e12; ///< bf16/f16 tensor cores, dense
  double tf32_flops_per_second = 494.7e12;     ///< TF32 tensor cores, dense
  double fp32_flops_per_second = 66.9e12;      ///< fp32 CUDA cores (FMA = 2 FLOPs)
};
inline constexpr DeviceSpeed kH200{};

/// Which peak a launch's FLOPs run at.
enum class FlopRate {
  Fp32,     ///< CUDA-core fp32: every generated kernel (16-bit values compute in f32), f32/f64 GEMMs (TF32 off)
  Tf32,     ///< f32 GEMMs with TF32 tensor cores allowed
  Tensor16, ///< bf16/f16 GEMMs on tensor cores
};
const char *rateName(FlopRate rate);
double peakFlopsPerSecond(FlopRate rate, const DeviceSpeed &speed = kH200);

/// max(bytes / bytes_per_second, flops / flops_per_second), seconds.
double rooflineSeconds(int64_t bytes, int64_t flops, double flops_per_second, double bytes_per_second);

/// One launch of a compiled forward or backward, with its model numbers.
struct KernelPerf {
  std::string name;       ///< the fusion's kernel name, "gemm MxNxK", "<fusion> (gemm+bias)"
  std::string function;   ///< "forward" or "backward"
  std::string kind;       ///< "pointwise", "warp-rows", ... (generated kernels); "gemm", "conv", "pool" (library)
  int64_t bytes_read = 0; ///< operand bytes (each operand once)
  int64_t bytes_written = 0;
  int64_t flops = 0;
  FlopRate rate = FlopRate::Fp32;
  int64_t block_threads = 0; ///< 0: a library launch (cuBLASLt, conv, pooling): no occupancy
  int64_t grid_blocks = -1;  ///< -1: set at run time (shape-generic kernel) or by the library
  /// ptxas' report (sm_90); when absent, `ptxas_note` says why ("n/a (...)").
  bool has_ptxas = false;
  std::string ptxas_note;
  int64_t registers = 0;
  int64_t spill_bytes = 0;  ///< spill stores + spill loads
  int64_t shared_bytes = 0; ///< static (ptxas) + dynamic shared memory per block

  // Derived by finish():
  Occupancy occupancy;             ///< valid when has_ptxas and block_threads > 0
  double arithmetic_intensity = 0; ///< flops / (bytes_read + bytes_written), FLOP/byte
  double roofline_seconds = 0;
  bool compute_bound = false; ///< flops / peak > bytes / bandwidth

  int64_t bytes() const { return bytes_read + bytes_written; }
  /// Fills the derived fields from the others.
  void finish(const DeviceSpeed &speed = kH200, const SmLimits &limits = kSm90);
};

/// One report line: "name [kind, 256 threads x 40 blocks]: reads .. B,
/// writes .. B, .. FLOPs, AI .. FLOP/B, memory-bound, roofline 1.280e-09 s;
/// 16 registers, 0 spill bytes, occupancy 100% (8 blocks/SM, warps)"; the
/// roofline in seconds with printf's "%.3e".
std::string formatKernelPerf(const KernelPerf &k);

/// "%.3e" of `seconds` (the report's number format).
std::string formatSeconds(double seconds);

} // namespace kiln::codegen::perf
