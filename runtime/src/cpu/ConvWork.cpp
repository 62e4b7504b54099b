// The CPU backend's convolution and max pooling work (DeviceBackend::conv2d,
// max_pool2d): strided views to the contiguous runtime::conv2d /
// runtime::max_pool2d of Conv.cpp and Pool.cpp.
#include <stdexcept>
#include <string>
#include <vector>

#include "CpuWork.h"

namespace kiln::runtime::cpu {
namespace {

bool is_contiguous(const TensorView &v) {
  int64_t expected = 1;
  for (size_t d = v.sizes.size(); d-- > 0;) {
    if (v.sizes[d] != 1 && v.strides[d] != expected)
      return false;
    expected *= v.sizes[d];
  }
  return true;
}

/// The data of `v`, contiguous: in place, or copied into `scratch`.
const void *dense_data(const TensorView &v, std::vector<char> &scratch) {
  if (is_contiguous(v))
    return v.data();
  scratch.resize(static_cast<size_t>(v.numel()) * itemsize(v.dtype));
  copy_to_contiguous(v, scratch.data());
  return scratch.data();
}

std::array<int64_t, 4> dims4(const TensorView &v, const char *what) {
  if (v.sizes.size() != 4)
    throw std::runtime_error(std::string(what) + ": expected a rank-4 view, got rank " +
                             std::to_string(v.sizes.size()));
  return {v.sizes[0], v.sizes[1], v.sizes[2], v.sizes[3]};
}

} // namespace

void conv2d(ConvOp op, const Conv2dParams &p, const TensorView &a, const TensorView &b, const TensorView &out) {
  ConvShape s{};
  const auto da = dims4(a, "conv2d"), db = dims4(b, "conv2d"), dout = dims4(out, "conv2d");
  switch (op) {
  case ConvOp::Forward: s = {da, db, dout}; break;
  case ConvOp::InputGrad: s = {dout, db, da}; break;
  case ConvOp::WeightGrad: s = {da, dout, db}; break;
  }
  std::vector<char> sa, sb;
  runtime::conv2d(op, p, s, out.dtype, dense_data(a, sa), dense_data(b, sb), out.data());
}

void max_pool2d(MaxPoolOp op, const Pool2dParams &p, const TensorView &a, const TensorView &indices,
                const TensorView &values) {
  std::vector<char> sa, si;
  const void *x = dense_data(a, sa);
  const bool has_indices = indices.buffer != nullptr, has_values = values.buffer != nullptr;
  void *v = has_values ? values.data() : nullptr;
  auto *idx = static_cast<int64_t *>(has_indices ? const_cast<void *>(dense_data(indices, si)) : nullptr);
  // Forward: the windows are the results; Backward: `a` (grad y) holds them; Gather: `values`.
  const TensorView &windows = op == MaxPoolOp::Forward ? (has_values ? values : indices)
                                                       : (op == MaxPoolOp::Backward ? a : values);
  const TensorView &planes = op == MaxPoolOp::Backward ? values : a;
  runtime::max_pool2d(op, p, dims4(planes, "max_pool2d"), dims4(windows, "max_pool2d"), planes.dtype, x, v, idx);
}

} // namespace kiln::runtime::cpu
