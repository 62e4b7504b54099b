// TestKernels.h - plain C++ kernels in MLIR's packed convention (what a JIT
// kernel looks like to LaunchExecutable) and tensor helpers, shared by the
// runtime tests.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/runtime/LaunchExecutable.h"

namespace kiln::runtime::test {

/// Reads one rank-1 f32 memref descriptor from packed args starting at `i`.
struct Memref1 {
  float *base;
  int64_t offset, size, stride;
  float &operator[](int64_t k) const { return base[offset + k * stride]; }
};
inline Memref1 memref1(void **args, int i) {
  return Memref1{*static_cast<float **>(args[i + 1]), *static_cast<int64_t *>(args[i + 2]),
                 *static_cast<int64_t *>(args[i + 3]), *static_cast<int64_t *>(args[i + 4])};
}

/// out[k] = in[k] + 1 (rank-1 memrefs: 5 packed entries each).
inline void addOne(void **args) {
  Memref1 in = memref1(args, 0), out = memref1(args, 5);
  for (int64_t k = 0; k < in.size; ++k)
    out[k] = in[k] + 1.0f;
}
/// out[k] = in[k] * 2.
inline void timesTwo(void **args) {
  Memref1 in = memref1(args, 0), out = memref1(args, 5);
  for (int64_t k = 0; k < in.size; ++k)
    out[k] = in[k] * 2.0f;
}
/// out[k] = a[k] + b[k].
inline void addTwo(void **args) {
  Memref1 a = memref1(args, 0), b = memref1(args, 5), out = memref1(args, 10);
  for (int64_t k = 0; k < a.size; ++k)
    out[k] = a[k] + b[k];
}

/// A contiguous f32 tensor holding `values`, in `alloc`'s memory (host-accessible).
inline TensorView makeTensor(std::vector<int64_t> sizes, const std::vector<float> &values,
                             Allocator &alloc = cpu_allocator()) {
  TensorView v;
  v.buffer = Buffer::make(std::max<size_t>(values.size(), 1) * sizeof(float), alloc);
  std::memcpy(v.buffer->data(), values.data(), values.size() * sizeof(float));
  v.sizes = std::move(sizes);
  v.strides = contiguous_strides(v.sizes);
  v.dtype = kFloat32;
  return v;
}

inline float at(const TensorView &v, std::vector<int64_t> index) {
  int64_t off = v.offset;
  for (size_t d = 0; d < index.size(); ++d)
    off += index[d] * v.strides[d];
  return static_cast<const float *>(v.buffer->data())[off];
}

} // namespace kiln::runtime::test
