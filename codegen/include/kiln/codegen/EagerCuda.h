// kiln/codegen/EagerCuda.h - one eager op as a shape-generic CUDA kernel:
// the op's dialect form (a one-node ir::Graph, the same form a trace
// records) through kiln-fuse and the CUDA C emitter (codegen/cuda), made
// shape-generic by comparing it with the same graph at other sizes
// (GeneralizeKernel.h). Eager CUDA ops run these kernels (frontend/src/cuda/);
// no CUDA kernel is written by hand per op (ARCHITECTURE.md, "the backend
// boundary").
//
//   ir::Graph g = ..., ref = ...;   // the same op at two sets of sizes
//   EagerCudaKernel k;
//   if (!emitEagerCudaKernel(g, ref, "kiln_eager_add_f32_r2", &k, &error)) throw ...;
//   device->load_kernels(k.source, {k.name});     // NVRTC or the simulator
//   // per call: fill each parameter from the call's tensors (EagerCudaParam)
//   //           and launch k.launch.gridBlocks(sizes) x k.launch.block_threads threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/codegen/CudaLaunch.h"
#include "kiln/ir/Graph.h"
#include "kiln/runtime/IndexCheck.h"

namespace kiln::codegen {

/// One kernel parameter, in order, and where its value comes from.
struct EagerCudaParam {
  enum class Kind {
    Input,  ///< a pointer to graph input `index`'s first element (`const T *`)
    Output, ///< a pointer to graph output `index`'s first element, row-major (`T *`)
    Status, ///< index-check status word `index`: a `long long *` to 2 device int64s (runtime/IndexCheck.h)
    Size,   ///< size class `index`: `long long` (sizeOf[index] says which tensor dim holds it)
    Stride, ///< the stride (elements) of graph input `index`, dim `dim`: `long long`
    Scalar, ///< the value of the graph's Constant node `index` (counted in node order): `ctype` by value
  };
  Kind kind = Kind::Input;
  int index = 0;
  int dim = 0;
  std::string ctype; ///< its C type ("long long", "float", "double", pointer types)
};

/// Where a size class's value is read at launch: dim `dim` of graph input
/// (or, when `output`, graph output) `index`.
struct EagerSizeSource {
  bool output = false;
  int index = 0;
  int dim = 0;
};

/// A printed, shape-generic kernel and its launch rule.
struct EagerCudaKernel {
  std::string name;                   ///< the extern "C" symbol
  std::string source;                 ///< the whole text to compile (the emitter's prelude + the kernel)
  size_t body_offset = 0;             ///< where the kernel starts in `source` (after the prelude)
  std::vector<EagerCudaParam> params; ///< in order
  std::vector<EagerSizeSource> sizeOf; ///< per size class
  cuda::LaunchRule launch;            ///< grid (launch.gridBlocks(class sizes)) and block of a launch
  /// Per Status parameter: what its status word checks (the op's name and
  /// indexed dim; the indexed size is static, part of the kernel's key).
  std::vector<runtime::IndexCheck> checks;

  /// The kernel's kind ("pointwise", "warp-rows", ...): cuda::kindName(launch.kind).
  const char *kind() const { return cuda::kindName(launch.kind); }
};

/// Builds `graph` (one node over graph inputs, its outputs returned) and
/// `reference` (the same graph with other sizes: every dim that should be
/// dynamic differs, pairs of sizes tell dims of one class), runs kiln-fuse on
/// both, and emits the one fusion as a shape-generic kernel named `name`.
/// Every input stride is a run-time parameter (the inputs may be any strided
/// view; outputs are row-major). The indexed dim of a gather or scatter_add
/// must have the same size in both graphs (its index check is static).
/// Every Constant node becomes a scalar
/// parameter; the Constant nodes of `graph` must have distinct values, and
/// those of `reference` other values. Returns false with `*error` naming the op
/// when the op's form is not one fusion over the graph's inputs or the
/// emitter does not support it yet; never emits wrong code.
bool emitEagerCudaKernel(const ir::Graph &graph, const ir::Graph &reference, const std::string &name,
                         EagerCudaKernel *out, std::string *error);

} // namespace kiln::codegen
