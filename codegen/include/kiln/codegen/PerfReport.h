// kiln/codegen/PerfReport.h - the static performance report of a compiled
// graph (kiln::explain's "performance" section, kiln::kernel_perf): every
// launch of its forward and backward (CompiledGraph::launches) through the
// model of kiln/codegen/PerfModel.h, with registers and spills from ptxas.
//
//   std::vector<perf::KernelPerf> k = kernelPerfRecords(graph);   // launch order
//   std::string text = formatPerfReport(k, "  ");
//
// Plain C++ (no MLIR). Implemented in codegen/cuda/PerfReport.cpp.
#pragma once

#include <string>
#include <vector>

#include "kiln/codegen/Compiler.h"
#include "kiln/codegen/PerfModel.h"

namespace kiln::codegen {

/// One record per launch of `graph` (forward, then backward), finished
/// (KernelPerf::finish) for `speed` and `limits`. The generated kernels'
/// registers, spills and static shared memory come from compiling
/// graph.kernel_sources with NVRTC for sm_90 (`-Xptxas=-v`; the process's
/// NVRTC compiler and its caches, so a GPU run that compiled for sm_90 is
/// a memory hit) when NVRTC loads, also on the simulator; otherwise, and
/// for library launches (cuBLASLt GEMMs, convolutions, pooling), has_ptxas
/// is false and ptxas_note says why. Never throws.
std::vector<perf::KernelPerf> kernelPerfRecords(const CompiledGraph &graph,
                                                const perf::DeviceSpeed &speed = perf::kH200,
                                                const perf::SmLimits &limits = perf::kSm90);

/// The report: a header naming the model, then per function ("forward",
/// "backward") its launch count and total roofline time (the sum of its
/// launches', seconds) and one formatKernelPerf line per launch; each line
/// starts with `indent`.
std::string formatPerfReport(const std::vector<perf::KernelPerf> &records, const std::string &indent);

/// The sum of the roofline seconds of the records of `function`.
double totalRooflineSeconds(const std::vector<perf::KernelPerf> &records, const std::string &function);

} // namespace kiln::codegen
