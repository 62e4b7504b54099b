// kiln/ops.h - tensor operations with autograd (PyTorch names and semantics).
//
// Binary elementwise ops broadcast with NumPy rules ([3, 1] op [4] -> [3, 4]).
// Type promotion: float32 op int64 -> float32; both int64 -> int64; bool
// operands of arithmetic ops throw (convert with to()). float16/bfloat16
// inputs are computed in float32 and the result converted back.
// Every op throws kiln::Error naming the op and the bad value on wrong shape,
// dtype or rank. Gradients are written with these same ops, so the tracer of
// kiln::compile sees backward formulas as ordinary ops.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// ---- creation ------------------------------------------------------------
/// Filled tensors. Shapes may be empty ({} = a 0-d scalar).
Tensor full(const Shape &shape, double value, DType dtype = kFloat32);
Tensor zeros(const Shape &shape, DType dtype = kFloat32);
Tensor ones(const Shape &shape, DType dtype = kFloat32);
Tensor zeros_like(const Tensor &t);
Tensor ones_like(const Tensor &t);
/// 0-d tensor holding `value`.
Tensor scalar_tensor(double value, DType dtype = kFloat32);
/// [0, 1, ..., n-1] as int64 (or `dtype`).
Tensor arange(int64_t n, DType dtype = kInt64);
/// A tensor from row-major values; numel(shape) must equal values.size().
Tensor tensor(const std::vector<float> &values, const Shape &shape);
Tensor tensor(const std::vector<int64_t> &values, const Shape &shape);
/// float32 from a braced list: tensor({1.f, 2.f}, {2}).
inline Tensor tensor(std::initializer_list<float> values, const Shape &shape) {
  return tensor(std::vector<float>(values), shape);
}
/// Standard normal samples (Box-Muller on the Philox stream of the default
/// generator, see random.h).
Tensor randn(const Shape &shape, DType dtype = kFloat32);
/// Uniform samples in [low, high).
Tensor uniform(const Shape &shape, double low = 0.0, double high = 1.0, DType dtype = kFloat32);
Tensor rand(const Shape &shape, DType dtype = kFloat32);

// ---- elementwise -----------------------------------------------------------
Tensor add(const Tensor &a, const Tensor &b);
Tensor sub(const Tensor &a, const Tensor &b);
Tensor mul(const Tensor &a, const Tensor &b);
/// True division; int64 / int64 gives float32 (as torch.div).
Tensor div(const Tensor &a, const Tensor &b);
Tensor neg(const Tensor &a);
Tensor exp(const Tensor &a);
/// Natural log; log(0) = -inf, log(x<0) = nan (IEEE).
Tensor log(const Tensor &a);
Tensor relu(const Tensor &a);
/// a^exponent elementwise (float only).
Tensor pow(const Tensor &a, double exponent);
Tensor sqrt(const Tensor &a);
/// Elementwise max of two tensors (gradient goes to the larger; ties split).
Tensor maximum(const Tensor &a, const Tensor &b);

// comparisons (broadcasting, bool result, no gradient)
Tensor eq(const Tensor &a, const Tensor &b);
Tensor ne(const Tensor &a, const Tensor &b);
Tensor lt(const Tensor &a, const Tensor &b);
Tensor le(const Tensor &a, const Tensor &b);
Tensor gt(const Tensor &a, const Tensor &b);
Tensor ge(const Tensor &a, const Tensor &b);
/// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b);

// ---- reductions ----------------------------------------------------------------
/// Sum over `dims` (empty = all dims). [N, C] sum({1}) -> [N]; keepdim -> [N, 1].
Tensor sum(const Tensor &a, const Shape &dims = {}, bool keepdim = false);
Tensor mean(const Tensor &a, const Shape &dims = {}, bool keepdim = false);
/// Max over `dims` (PyTorch amax); the gradient is split evenly among ties.
Tensor amax(const Tensor &a, const Shape &dims = {}, bool keepdim = false);
/// Index of the max along `dim` (first on ties), int64, no gradient.
Tensor argmax(const Tensor &a, int64_t dim, bool keepdim = false);

// ---- linear algebra ----------------------------------------------------------------
/// [M, K] x [K, N] -> [M, N]; [K] vectors are promoted as in torch.matmul;
/// float32 only (oneDNN sgemm).
Tensor matmul(const Tensor &a, const Tensor &b);

// ---- dtypes -------------------------------------------------------------------
/// PyTorch's type promotion for two tensor dtypes: bool < integers < floats;
/// int32+int64 -> int64; float16+bfloat16 -> float32; anything+float64 -> float64.
DType promote_types(DType a, DType b);

// ---- layout -------------------------------------------------------------------
/// Broadcast shape of two shapes (NumPy rules); throws naming `op` if incompatible.
Shape broadcast_shapes(const Shape &a, const Shape &b, const char *op);
/// Reduces `grad` to `shape` by summing broadcast dims (the gradient of expand).
Tensor sum_to(const Tensor &grad, const Shape &shape);

}  // namespace kiln
