// Reductions: sum, mean, amax/amin over any set of dims, max()/min() over
// all dims, argmax/argmin along one dim or over all.
#include <algorithm>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "dispatch.h"
#include "kernels.h"
#include "shape_utils.h"
#include "../trace.h"
#include "../amp/autocast.h"

namespace kiln {
namespace {

using shape_utils::reduced_shape;
constexpr auto normalize_dims = shape_utils::wrap_dims;

using autograd::TensorList;



/// Moves reduced dims last and makes the tensor contiguous, so each output
/// element reduces one contiguous block of `inner` elements.
Tensor reduction_layout(const Tensor &x, const Shape &dims, int64_t *inner) {
  Shape perm;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) perm.push_back(i);
  *inner = 1;
  for (int64_t d : dims) {
    perm.push_back(d);
    *inner *= x.size(d);
  }
  NoGradGuard no_grad;
  Tensor p = x.detach();
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (!identity) {
    // Build the permuted view directly: these are kernel internals, not traced ops.
    auto impl = std::make_shared<TensorImpl>(*p.impl());
    for (size_t i = 0; i < perm.size(); ++i) {
      impl->sizes[i] = x.sizes()[perm[i]];
      impl->strides[i] = x.strides()[perm[i]];
    }
    p = Tensor(impl);
  }
  if (p.is_contiguous()) return p;
  Tensor c = Tensor::empty(p.sizes(), p.dtype(), p.device());
  kernels::copy_into_contiguous(p, c);
  return c;
}

/// Expands a reduced gradient back over the input shape.
Tensor expand_reduced(const Tensor &g, const Shape &in_shape, const Shape &dims, bool keepdim) {
  Tensor r = keepdim ? g : g.reshape(reduced_shape(in_shape, dims, true));
  return r.expand(in_shape);
}

bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }

/// Reduces each contiguous block of `inner` elements of `c` into one element of out.
enum class Red { Sum, Max, Min, ArgMax, ArgMin };
using ReduceKernel = void(Red op, const Tensor &c, int64_t inner, const Tensor &out);
dispatch::DispatchStub<ReduceKernel> reduce_stub("reduction");

void sum_cpu(const Tensor &c, int64_t inner, const Tensor &out) {
  const int64_t outer = out.numel();
  kernels::dispatch(out.dtype(), "sum", [&](auto zero) {
    using T = decltype(zero);
    const T *p = static_cast<const T *>(c.raw_data());
    T *o = static_cast<T *>(out.raw_data());
    // Floats: cascade sums in T (kernels::contiguous_sum); one long row is
    // split into fixed chunks, many rows are spread over threads by row.
    if (outer == 1) {
      o[0] = kernels::contiguous_sum(p, inner, /*parallel=*/true);
      return;
    }
    const int64_t rows_per_chunk = std::max<int64_t>(1, kernels::kSumChunk / std::max<int64_t>(inner, 1));
    kernels::parallel_for(outer, rows_per_chunk, outer * inner, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = kernels::contiguous_sum(p + i * inner, inner, /*parallel=*/false);
    });
  });
}

/// amax (kMax) or amin of each block; NaN propagates (as torch.amax/amin).
template <bool kMax> void extreme_cpu(const Tensor &c, int64_t inner, const Tensor &out) {
  const int64_t outer = out.numel();
  kernels::dispatch(out.dtype(), kMax ? "amax" : "amin", [&](auto zero) {
    using T = decltype(zero);
    const T *p = static_cast<const T *>(c.raw_data());
    T *o = static_cast<T *>(out.raw_data());
    auto combine = [](T best, T v) { return kMax ? kernels::max_propagate(best, v) : kernels::min_propagate(best, v); };
    if (outer == 1 && inner > kernels::kSumChunk) {
      const int64_t chunks = (inner + kernels::kSumChunk - 1) / kernels::kSumChunk;
      std::vector<T> part(static_cast<size_t>(chunks));
      kernels::parallel_for(chunks, 1, inner, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k)
          part[k] = kernels::contiguous_extreme<kMax>(p + k * kernels::kSumChunk,
                                                      std::min(kernels::kSumChunk, inner - k * kernels::kSumChunk));
      });
      T m = part[0];
      for (int64_t k = 1; k < chunks; ++k) m = combine(m, part[k]);
      o[0] = m;
      return;
    }
    const int64_t rows_per_chunk = std::max<int64_t>(1, kernels::kSumChunk / inner);
    kernels::parallel_for(outer, rows_per_chunk, outer * inner, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = kernels::contiguous_extreme<kMax>(p + i * inner, inner);
    });
  });
}

/// argmax (kMax) or argmin of each block: the first NaN wins (as
/// torch.argmax/argmin and Kiln's max(x, dim).indices); ties keep the first index.
template <bool kMax> void arg_extreme_cpu(const Tensor &c, int64_t inner, const Tensor &out) {
  kernels::dispatch(c.dtype(), kMax ? "argmax" : "argmin", [&](auto zero) {
    using T = decltype(zero);
    const T *p = static_cast<const T *>(c.raw_data());
    int64_t *o = out.data_ptr<int64_t>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      const T *row = p + i * inner;
      int64_t best = 0;
      for (int64_t j = 1; j < inner && row[best] == row[best]; ++j)
        if ((kMax ? row[j] > row[best] : row[j] < row[best]) || row[j] != row[j]) best = j;
      o[i] = best;
    }
  });
}

void reduce_cpu(Red op, const Tensor &c, int64_t inner, const Tensor &out) {
  switch (op) {
  case Red::Sum: sum_cpu(c, inner, out); break;
  case Red::Max: extreme_cpu<true>(c, inner, out); break;
  case Red::Min: extreme_cpu<false>(c, inner, out); break;
  case Red::ArgMax: arg_extreme_cpu<true>(c, inner, out); break;
  case Red::ArgMin: arg_extreme_cpu<false>(c, inner, out); break;
  }
}
const dispatch::KernelRegistrar<ReduceKernel> reduce_cpu_reg(reduce_stub, DeviceType::CPU, reduce_cpu);

/// `t`'s memory seen as the row-major `sizes` (t contiguous with that numel).
Tensor row_major_view(const Tensor &t, const Shape &sizes) {
  return shape_utils::strided_view(t, sizes, contiguous_strides(sizes), t.storage_offset());
}

/// CUDA: the dialect reduction over dim 1 of c seen as [outer, inner].
void reduce_cuda(Red op, const Tensor &c, int64_t inner, const Tensor &out) {
  const int64_t outer = out.numel();
  const Tensor rows = row_major_view(c, {outer, inner}), result = row_major_view(out, {outer});
  ir::OpKind kind = ir::OpKind::ReduceSum;
  const char *name = "sum";
  switch (op) {
  case Red::Sum: break;
  case Red::Max: kind = ir::OpKind::ReduceMax, name = "amax"; break;
  case Red::Min: kind = ir::OpKind::ReduceMin, name = "amin"; break;
  case Red::ArgMax: kind = ir::OpKind::ArgMax, name = "argmax"; break;
  case Red::ArgMin: kind = ir::OpKind::ArgMin, name = "argmin"; break;
  }
  dispatch::run_graph_kernel(name, dispatch::graph_node(kind, {1}), {rows}, {result});
}
const dispatch::KernelRegistrar<ReduceKernel> reduce_cuda_reg(reduce_stub, DeviceType::CUDA, reduce_cuda);

/// The backward of amax/amin over `dims` of x (its result `out`): ties share
/// the gradient evenly (as torch.amax/amin). With `nan_aware` (max()/min()
/// over all dims), a NaN result sends the gradient to the NaN elements, as
/// PyTorch's evenly_distribute_backward (torch/csrc/autograd/FunctionsManual.cpp).
void record_extreme_backward(const Tensor &out, const Tensor &x, const Shape &dims, bool keepdim, bool is_max,
                             bool nan_aware) {
  const char *name = nan_aware ? (is_max ? "MaxBackward" : "MinBackward") : (is_max ? "AmaxBackward" : "AminBackward");
  const Shape in_shape = x.sizes();
  autograd::record(out, name, {x}, {x, out.detach()},
                   [in_shape, dims, keepdim, nan_aware](const TensorList &g, const TensorList &s) -> TensorList {
                     Tensor best = expand_reduced(s[1], in_shape, dims, keepdim);
                     Tensor hit = eq(s[0], best);
                     if (nan_aware) hit = where(ne(s[0], s[0]), ne(best, best), hit);
                     Tensor mask = hit.to(g[0].dtype());
                     Tensor count = sum(mask, dims, /*keepdim=*/true);
                     Tensor share = expand_reduced(g[0], in_shape, dims, keepdim) / count.expand(in_shape);
                     return {share * mask};
                   });
}

/// amax (is_max) or amin over dims, with the backward of record_extreme_backward.
Tensor extreme_reduce(const Tensor &a, const Shape &dims_in, bool keepdim, bool is_max, bool nan_aware = false) {
  const char *op = is_max ? "amax" : "amin";
  KILN_CHECK(a.defined(), op, ": input is an undefined tensor");
  if (is_half(a.dtype())) return extreme_reduce(a.to(kFloat32), dims_in, keepdim, is_max, nan_aware).to(a.dtype());
  Shape dims = normalize_dims(a, dims_in, op);
  for (int64_t d : dims)
    KILN_CHECK(a.size(d) > 0, op, ": cannot reduce over zero-size dimension ", d, " of shape ", shape_str(a.sizes()));
  KILN_CHECK(a.dtype() != kBool, op, ": bool input is not supported; convert with .to() first");
  int64_t inner = 1;
  Tensor c = reduction_layout(a, dims, &inner);
  Tensor out = Tensor::empty(reduced_shape(a.sizes(), dims, keepdim), a.dtype(), a.device());
  reduce_stub(op, a.device().type, is_max ? Red::Max : Red::Min, c, inner, out);
  trace::Attrs attrs;
  attrs.ints = dims;
  attrs.keepdim = keepdim;
  trace::record(is_max ? ir::OpKind::ReduceMax : ir::OpKind::ReduceMin, {a}, out, attrs);
  if (autograd::any_requires_grad({a})) record_extreme_backward(out, a, dims, keepdim, is_max, nan_aware);
  return out;
}

/// argmax (is_max) or argmin along one dim: int64, no gradient; traced as
/// kiln.argmax / kiln.argmin. 16-bit floats compare in float32, bool as int64.
Tensor arg_extreme(const Tensor &a, int64_t dim, bool keepdim, bool is_max) {
  const char *op = is_max ? "argmax" : "argmin";
  KILN_CHECK(a.defined(), op, ": input is an undefined tensor");
  KILN_CHECK(a.dim() > 0, op, ": expected a tensor with at least 1 dimension, got a 0-d tensor");
  Shape dims = normalize_dims(a, {dim}, op);
  KILN_CHECK(a.size(dims[0]) > 0, op, ": cannot reduce over zero-size dimension ", dims[0], " of shape ",
             shape_str(a.sizes()));
  Tensor x = a;
  if (is_half(a.dtype())) x = a.to(kFloat32);
  else if (a.dtype() == kBool) x = a.to(kInt64);
  int64_t inner = 1;
  Tensor c = reduction_layout(x, dims, &inner);
  Tensor out = Tensor::empty(reduced_shape(a.sizes(), dims, keepdim), kInt64, a.device());
  reduce_stub(op, a.device().type, is_max ? Red::ArgMax : Red::ArgMin, c, inner, out);
  trace::Attrs attrs;
  attrs.ints = dims;
  attrs.keepdim = keepdim;
  trace::record(is_max ? ir::OpKind::ArgMax : ir::OpKind::ArgMin, {x}, out, attrs);
  return out;
}

/// torch.max(a) / torch.min(a): a 0-d extreme with the NaN-aware even
/// split of record_extreme_backward. (Computed with autograd on, not under
/// a NoGradGuard: a graph-break segment replays nodes recorded without grad
/// as constants, which would drop this gradient.)
Tensor all_extreme(const Tensor &a, bool is_max) {
  const char *op = is_max ? "max" : "min";
  KILN_CHECK(a.defined(), op, ": input is an undefined tensor");
  KILN_CHECK(a.numel() > 0, op, "(): expected a non-empty tensor (shape ", shape_str(a.sizes()),
             "); use max(a, dim) or amax with a dim");
  return extreme_reduce(a, {}, /*keepdim=*/false, is_max, /*nan_aware=*/true);
}

}  // namespace

Tensor sum(const Tensor &a, const Shape &dims_in, bool keepdim) {
  amp::detail::AutocastOp ac("sum");
  if (ac) return sum(ac.cast(a), dims_in, keepdim);
  KILN_CHECK(a.defined(), "sum: input is an undefined tensor");
  if (is_half(a.dtype())) return sum(a.to(kFloat32), dims_in, keepdim).to(a.dtype());
  Shape dims = normalize_dims(a, dims_in, "sum");
  // Integer and bool sums accumulate in int64 (as torch.sum); floats keep their type.
  const DType out_type = a.is_floating_point() ? a.dtype() : kInt64;
  Tensor x = a.to(out_type);
  int64_t inner = 1;
  Tensor c = reduction_layout(x, dims, &inner);
  Tensor out = Tensor::empty(reduced_shape(a.sizes(), dims, keepdim), out_type, a.device());
  reduce_stub("sum", x.device().type, Red::Sum, c, inner, out);
  trace::Attrs attrs;
  attrs.ints = dims;
  attrs.keepdim = keepdim;
  trace::record(ir::OpKind::ReduceSum, {x}, out, attrs);
  if (autograd::any_requires_grad({x})) {
    Shape in_shape = a.sizes();
    autograd::record(out, "SumBackward", {x}, {},
                     [in_shape, dims, keepdim](const TensorList &g, const TensorList &) -> TensorList {
      return {expand_reduced(g[0], in_shape, dims, keepdim)};
    });
  }
  return out;
}

Tensor mean(const Tensor &a, const Shape &dims_in, bool keepdim) {
  amp::detail::AutocastOp ac("mean");
  if (ac) return mean(ac.cast(a), dims_in, keepdim);
  KILN_CHECK(a.defined(), "mean: input is an undefined tensor");
  KILN_CHECK(a.is_floating_point(), "mean: expected a floating point input, got ", dtype_name(a.dtype()),
             "; convert with .to(kiln::kFloat32)");
  Shape dims = normalize_dims(a, dims_in, "mean");
  int64_t count = 1;
  for (int64_t d : dims) count *= a.size(d);
  return sum(a, dims, keepdim) * (1.0 / static_cast<double>(count));
}

Tensor amax(const Tensor &a, const Shape &dims, bool keepdim) { return extreme_reduce(a, dims, keepdim, true); }
Tensor amin(const Tensor &a, const Shape &dims, bool keepdim) { return extreme_reduce(a, dims, keepdim, false); }
Tensor max(const Tensor &a) { return all_extreme(a, true); }
Tensor min(const Tensor &a) { return all_extreme(a, false); }

Tensor argmax(const Tensor &a, int64_t dim, bool keepdim) { return arg_extreme(a, dim, keepdim, true); }
Tensor argmin(const Tensor &a, int64_t dim, bool keepdim) { return arg_extreme(a, dim, keepdim, false); }
// Over all dims: the flattened tensor's index (as torch.argmax(a)), 0-d.
Tensor argmax(const Tensor &a) {
  KILN_CHECK(a.defined(), "argmax: input is an undefined tensor");
  return arg_extreme(a.reshape({a.numel()}), 0, false, true);
}
Tensor argmin(const Tensor &a) {
  KILN_CHECK(a.defined(), "argmin: input is an undefined tensor");
  return arg_extreme(a.reshape({a.numel()}), 0, false, false);
}

Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(const Shape &dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(const Shape &dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }
Tensor Tensor::amax(const Shape &dims, bool keepdim) const { return kiln::amax(*this, dims, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return kiln::argmax(*this, dim, keepdim); }

}  // namespace kiln
