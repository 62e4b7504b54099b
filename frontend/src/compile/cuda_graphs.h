// compile/cuda_graphs.h - CompileOptions::cuda_graphs: a static-shape
// compiled forward or backward on CUDA captured once into a CUDA graph and
// replayed (issue 16 item 3), following the sequence at the end of
// kiln/runtime/cuda/CudaGraph.h.
//
//   call 1: stream launches (warm-up: kernels loaded, heuristics cached);
//   call 2: static inputs made (the caller's own buffer for the module's
//           parameters and buffers, whose addresses are stable; a private
//           buffer for the others), the launch list captured on the
//           function's capture stream into its one graph pool, then replayed;
//   later:  inputs copied into the private static inputs (device to device
//           on the thread's current stream), replay, outputs copied out into
//           fresh buffers (a later replay never overwrites what the caller
//           holds), hooks told of each output.
// A capture that throws (or whose run reports an error) is the shape's
// fallback reason: it runs with stream launches from then on. A stable input
// whose address changes makes that input private and the shape captures
// again (once per input).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/runtime/Executable.h"
#include "kiln/runtime/Stream.h"

namespace kiln {

/// What one executable (a shape's forward or backward) did.
struct CudaGraphStatus {
  std::string label;    ///< "forward [2, 8] int64"
  std::string state = "warm-up pending";  ///< "captured", "fell back: <reason>", ...
  int captures = 0, replays = 0;
};

/// Per compiled function: the one graph pool, the capture stream, the
/// counters and each executable's status (for kiln::explain).
struct CompiledModule::CudaGraphs {
  int device = 0;
  uint64_t pool = 0;                         ///< graph_pool_handle, made on first capture
  std::unique_ptr<runtime::Stream> capture_stream;
  int captures = 0, replays = 0, fallbacks = 0;
  std::vector<std::string> notes;            ///< e.g. the shape-generic artifacts that do not use graphs
  std::vector<std::shared_ptr<CudaGraphStatus>> entries;
  int64_t pool_reserved_bytes() const;
  std::string report() const;                ///< the "cuda graphs" section of explain
};

namespace compile_detail {
/// `inner` run through CUDA graphs on CUDA device `device`; stable[i]: input
/// i is a tensor whose address stays (a captured parameter or buffer).
std::shared_ptr<runtime::Executable> with_cuda_graphs(std::shared_ptr<runtime::Executable> inner,
                                                      std::shared_ptr<CompiledModule::CudaGraphs> graphs,
                                                      std::vector<bool> stable, std::string label);
} // namespace compile_detail

} // namespace kiln
