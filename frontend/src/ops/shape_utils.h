// shape_utils.h (internal) - dimension wrapping, reduced shapes and raw views
// shared by the op files.
#pragma once

#include <algorithm>

#include "kiln/tensor.h"

namespace kiln::shape_utils {

/// A view of `base` with the given layout, sharing storage (no autograd, no trace).
inline Tensor strided_view(const Tensor &base, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  return Tensor(std::move(impl));
}

/// Wraps dim `d` of `a` into [0, dim) (a 0-d tensor accepts 0 and -1 and gets 0).
inline int64_t wrap_dim(const Tensor &a, int64_t d, const char *op) {
  const int64_t n = std::max<int64_t>(a.dim(), 1);
  KILN_CHECK(d >= -n && d < n, op, ": dimension ", d, " out of range for a tensor of shape ", shape_str(a.sizes()),
             " (expected ", -n, "..", n - 1, ")");
  return d < 0 ? d + n : d;
}

/// Sorted, wrapped, unique reduction dims; empty means all. A 0-d tensor gives {}.
inline Shape wrap_dims(const Tensor &a, const Shape &dims, const char *op) {
  Shape out;
  if (dims.empty())
    for (int64_t i = 0; i < a.dim(); ++i) out.push_back(i);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(a, d, op);
    KILN_CHECK(std::find(out.begin(), out.end(), w) == out.end(), op, ": dim ", w, " appears twice in ",
               shape_str(dims));
    out.push_back(w);
  }
  if (a.dim() == 0) out.clear();
  std::sort(out.begin(), out.end());
  return out;
}

/// Shape after reducing `dims` (kept as size 1 with keepdim).
inline Shape reduced_shape(const Shape &sizes, const Shape &dims, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) {
    const bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) out.push_back(sizes[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

}  // namespace kiln::shape_utils
