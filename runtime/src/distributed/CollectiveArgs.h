// The argument checks every process group makes at the call, one
// implementation for Gloo and NCCL (ProcessGroup.cpp). Each throws
// DistributedError Invalid naming the op and the bad value.
#pragma once

#include <cstddef>
#include <vector>

#include "kiln/runtime/distributed/ProcessGroup.h"

namespace kiln::runtime::distributed {

/// A dense (contiguous) view's element count; Invalid for a strided view
/// (naming the dim and its stride) or a view without storage.
size_t dense_numel(const TensorView &v, const char *op);

/// `parts` (allgather's outputs, reduce_scatter's inputs) are `size` dense
/// views, each of `n` elements of `one`'s dtype.
void check_parts(const char *op, const std::vector<TensorView> &parts, const TensorView &one, size_t n, int size);

/// `root` is a rank of a group of `size`.
void check_root(const char *op, int root, int size);

} // namespace kiln::runtime::distributed
