// kiln/runtime/TensorView.h - a strided view of a Buffer: what flows in and
// out of an Executable and into a backend's kernels, GEMMs and copies.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/runtime/Allocator.h"
#include "kiln/runtime/DType.h"

namespace kiln::runtime {

/// A strided view of a Buffer: what flows in and out of an Executable.
/// `offset` and `strides` are in elements.
struct TensorView {
  std::shared_ptr<Buffer> buffer;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  DType dtype = DType::Float32;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  void *data() const {
    return static_cast<char *>(buffer->data()) + offset * static_cast<int64_t>(itemsize(dtype));
  }
};

} // namespace kiln::runtime
