// kiln/cuda_graph.h - CUDA graphs of eager CUDA tensor ops (torch.cuda.CUDAGraph
// and torch.cuda.graph_pool_handle).
//
//   kiln::Tensor x = kiln::zeros({64, 32}).to(cuda0);   // the static input
//   kiln::cuda::Graph graph;
//   graph.capture_begin();                 // the capture stream is current now
//   kiln::Tensor y = (x * w + b).relu();   // recorded, not run; y's memory is the graph's
//   graph.capture_end();
//   for (...) {
//     x.copy_(next_batch);                 // new contents, same buffer
//     graph.replay();                      // y is recomputed in place
//   }
//
// Between capture_begin and capture_end the calling thread's current stream
// of the device is the graph's capture stream (one per device, shared by
// every Graph, as torch.cuda.graph's default capture stream, so graphs can
// share a pool), so the eager ops' kernels are recorded and the tensors they
// create come from the graph's private memory pool. What may run then: ops
// that only launch kernels on the current stream (pointwise, reductions,
// ...). Not: anything that reads a result on the host (.cpu(), item(), a
// printed tensor: they copy on the default stream and read memory the
// capture has not written), a copy from a CPU tensor (pageable memory), or
// an op the simulator runs on the CPU (matmul, conv on KILN_CUDA_SIM=1: they
// synchronize and invalidate the capture). An invalid capture makes
// capture_end throw kiln::Error with CUDA's reason. replay() runs the graph
// on the device's current stream (ordered with the eager ops around it).
// Memory: tensors created during the capture keep their buffers for the
// replays; reset() (or the destructor) gives the pool back once no graph
// holds it. The runtime class underneath is
// kiln/runtime/cuda/CudaGraph.h.
#pragma once

#include <cstdint>
#include <memory>

namespace kiln::cuda {

/// A new private memory pool id of device `device` (torch.cuda.graph_pool_handle()):
/// pass it to several graphs' capture_begin to share one pool (bounded
/// memory across shapes; replay such graphs in the order they were
/// captured). Throws kiln::Error when there is no CUDA backend or device.
uint64_t graph_pool_handle(int device = 0);

class Graph {
public:
  /// A graph of CUDA device `device`. Throws kiln::Error when there is no
  /// CUDA backend or no such device.
  explicit Graph(int device = 0);
  ~Graph();
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  /// Starts capturing the eager CUDA ops of this thread on the device into
  /// pool `pool` (0: a new one). Throws kiln::Error when the graph is
  /// capturing or holds a capture (reset() first).
  void capture_begin(uint64_t pool = 0);
  /// Ends the capture (the previous current stream is restored) and
  /// instantiates the graph. Throws kiln::Error naming the first illegal
  /// call when the capture was invalidated (the graph is then empty).
  void capture_end();
  /// Runs the captured ops again on the device's current stream. Throws
  /// kiln::Error when there is no captured graph.
  void replay();
  /// Drops the graph and its hold on the pool.
  void reset();
  /// The pool the graph captured into (0 before the first capture).
  uint64_t pool() const;
  bool is_captured() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace kiln::cuda
