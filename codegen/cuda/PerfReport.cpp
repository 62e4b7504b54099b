// kiln/codegen/PerfReport.h: a compiled graph's launches through the
// performance model (PerfModel.h), with ptxas' resources from NVRTC.
#include "kiln/codegen/PerfReport.h"

#include <exception>
#include <map>

#include "kiln/runtime/cuda/Nvrtc.h"

namespace kiln::codegen {

namespace {

namespace rc = runtime::cuda;

/// ptxas' report (sm_90) of every kernel of `units`, by kernel name; on
/// failure empty, with the reason in `*why`.
std::map<std::string, rc::KernelResources> ptxasResources(const std::vector<KernelSourceUnit> &units,
                                                          std::string *why) {
  std::map<std::string, rc::KernelResources> out;
  if (units.empty()) {
    *why = "no device kernels (not the CUDA target)";
    return out;
  }
  if (!rc::nvrtc_available()) {
    *why = "NVRTC not loadable: " + rc::nvrtc_unavailable_reason();
    return out;
  }
  std::vector<rc::KernelSource> sources;
  for (const KernelSourceUnit &u : units)
    sources.push_back(rc::KernelSource{u.source, u.kernel_names, "kiln_graph.cu"});
  try {
    for (const rc::CompiledModule &m : rc::default_nvrtc_compiler().compile_batch(sources, perf::kSm90Arch, 2))
      for (const rc::KernelResources &k : m.kernels)
        out[k.name] = k;
  } catch (const std::exception &e) {
    *why = std::string("NVRTC sm_90 compile failed: ") + e.what();
    out.clear();
  }
  return out;
}

perf::FlopRate gemmRate(DType dtype) {
  return dtype == DType::BFloat16 || dtype == DType::Float16 ? perf::FlopRate::Tensor16 : perf::FlopRate::Fp32;
}

const char *libraryKind(LaunchInfo::Kind kind) {
  switch (kind) {
  case LaunchInfo::Kind::Gemm:
    return "gemm";
  case LaunchInfo::Kind::Conv:
    return "conv";
  case LaunchInfo::Kind::Pool:
    return "pool";
  case LaunchInfo::Kind::Copy:
    return "copy";
  case LaunchInfo::Kind::Kernel:
    break;
  }
  return "kernel";
}

} // namespace

std::vector<perf::KernelPerf> kernelPerfRecords(const CompiledGraph &graph, const perf::DeviceSpeed &speed,
                                                const perf::SmLimits &limits) {
  std::string why;
  const std::map<std::string, rc::KernelResources> resources = ptxasResources(graph.kernel_sources, &why);
  std::vector<perf::KernelPerf> out;
  for (const LaunchInfo &launch : graph.launches) {
    perf::KernelPerf k;
    k.name = launch.name;
    k.function = launch.backward ? "backward" : "forward";
    k.bytes_read = launch.bytes_read;
    k.bytes_written = launch.bytes_written;
    k.flops = launch.flops;
    if (launch.kind == LaunchInfo::Kind::Kernel) {
      k.kind = launch.kernel_kind.empty() ? "kernel" : launch.kernel_kind;
      k.rate = perf::FlopRate::Fp32; // generated kernels compute in f32 (16-bit values widened)
      k.block_threads = launch.block_threads;
      k.grid_blocks = launch.grid_blocks;
      k.shared_bytes = launch.dynamic_shared_bytes;
      auto it = resources.find(launch.symbol);
      if (it != resources.end()) {
        k.has_ptxas = true;
        k.registers = it->second.registers;
        k.spill_bytes = it->second.spill_load_bytes + it->second.spill_store_bytes;
        k.shared_bytes += it->second.shared_bytes;
      } else {
        k.ptxas_note = "n/a (" + (why.empty() ? "kernel " + launch.symbol + " not in ptxas' report" : why) + ")";
      }
    } else {
      k.kind = libraryKind(launch.kind);
      k.rate = launch.kind == LaunchInfo::Kind::Gemm ? gemmRate(launch.dtype) : perf::FlopRate::Fp32;
      k.ptxas_note = launch.kind == LaunchInfo::Kind::Copy ? "n/a (the backend's strided copy)"
                                                           : "n/a (library kernel: cuBLASLt / the backend)";
    }
    k.finish(speed, limits);
    out.push_back(std::move(k));
  }
  return out;
}

double totalRooflineSeconds(const std::vector<perf::KernelPerf> &records, const std::string &function) {
  double total = 0;
  for (const perf::KernelPerf &k : records)
    if (k.function == function)
      total += k.roofline_seconds;
  return total;
}

std::string formatPerfReport(const std::vector<perf::KernelPerf> &records, const std::string &indent) {
  std::string s = indent + "performance (static model, H200 sm_90: roofline max(bytes / 4.8e12 B/s, FLOPs / peak), "
                           "peak fp32 66.9e12, tf32 494.7e12, bf16/f16 tensor 989.5e12 FLOP/s; occupancy from ptxas' "
                           "registers; kiln/codegen/PerfModel.h):\n";
  for (const char *function : {"forward", "backward"}) {
    int64_t n = 0, bytes = 0, flops = 0;
    for (const perf::KernelPerf &k : records)
      if (k.function == function) {
        ++n;
        bytes += k.bytes();
        flops += k.flops;
      }
    if (n == 0)
      continue;
    s += indent + "  " + function + ": " + std::to_string(n) + " launches, " + std::to_string(bytes) + " B, " +
         std::to_string(flops) + " FLOPs, total roofline " +
         perf::formatSeconds(totalRooflineSeconds(records, function)) + " s\n";
    for (const perf::KernelPerf &k : records)
      if (k.function == function)
        s += indent + "    " + perf::formatKernelPerf(k) + "\n";
  }
  return s;
}

} // namespace kiln::codegen
