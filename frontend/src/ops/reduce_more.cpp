// More reductions: var/std (with correction), max/min with indices,
// logsumexp, cumsum.
//
// var, std and logsumexp are composites of differentiable ops (sum, mean,
// sub, mul, exp, log, amax); max/min and cumsum are primitive kernels that
// walk one line along `dim` at a time with kernels::for_each_row.
#include <algorithm>
#include <cmath>
#include <type_traits>

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
using shape_utils::wrap_dim;
using shape_utils::wrap_dims;

using autograd::TensorList;

bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }

void check_input(const Tensor &a, const char *op) {
  KILN_CHECK(a.defined(), op, ": input is an undefined tensor");
}




/// Number of elements reduced over `dims`.
int64_t reduced_count(const Tensor &a, const Shape &dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= a.size(d);
  return n;
}

Tensor to_result(const Tensor &out, DType result) { return out.dtype() == result ? out : out.to(result); }

/// An iteration space with `dim` moved innermost, so that each for_each_row
/// call walks one line along `dim` of two operands (strides `sa`, `sb`).
struct Lines {
  Shape sizes, a_strides, b_strides;
};

Lines lines_along(const Shape &sizes, const Shape &sa, const Shape &sb, int64_t dim) {
  Lines l;
  if (sizes.empty()) return l;
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) {
    if (i == dim) continue;
    l.sizes.push_back(sizes[i]);
    l.a_strides.push_back(sa[i]);
    l.b_strides.push_back(sb[i]);
  }
  l.sizes.push_back(sizes[dim]);
  l.a_strides.push_back(sa[dim]);
  l.b_strides.push_back(sb[dim]);
  return l;
}

/// Whether `v` replaces `best` in a max (kMax) or min scan. The first NaN
/// wins and stays (as torch.max/min); ties keep the first index.
template <bool kMax, class T> bool better(T v, T best) {
  if constexpr (std::is_floating_point_v<T>)
    if (v != v) return best == best;
  return kMax ? v > best : v < best;
}

/// values/indices (contiguous, x's shape with size 1 at dim) = max or min of
/// each line of x along dim.
template <bool kMax, class T>
void scan_extreme(const Tensor &x, int64_t dim, const Tensor &values, const Tensor &indices) {
  const Shape out_strides = contiguous_strides(values.sizes());
  const Lines l = lines_along(x.sizes(), x.strides(), out_strides, dim);
  const T *in = reinterpret_cast<const T *>(kernels::storage_base(x));
  T *v = static_cast<T *>(values.raw_data());
  int64_t *idx = indices.data_ptr<int64_t>();
  kernels::for_each_row<2>(l.sizes, {&l.a_strides, &l.b_strides}, {x.storage_offset(), 0},
                           [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                             const T *line = in + off[0];
                             T best = line[0];
                             int64_t arg = 0;
                             for (int64_t j = 1; j < n; ++j)
                               if (better<kMax>(line[j * st[0]], best)) {
                                 best = line[j * st[0]];
                                 arg = j;
                               }
                             v[off[1]] = best;
                             idx[off[1]] = arg;
                           });
}

/// The gradient of max/min: g (x's shape with size 1 at dim) placed at
/// `indices` along dim, zero elsewhere; built from public ops.
Tensor place_at_indices(const Tensor &g, const Tensor &indices, const Shape &in_shape, int64_t dim) {
  Shape line_shape(in_shape.size(), 1);
  line_shape[dim] = in_shape[dim];
  Tensor positions = arange(in_shape[dim], kInt64, g.device()).reshape(line_shape);
  Tensor hit = eq(positions, indices);  // [.., n, ..] vs [.., 1, ..] -> in_shape
  return where(hit, g, zeros({}, g.dtype()));
}

/// The scans along one dim: max/min with indices, cumsum.
enum class Scan { Max, Min, Cumsum };

/// Scans x along `dim`: Max/Min write `values` and `indices` (x's shape with
/// dim of size 1), Cumsum writes `values` (x's shape); all contiguous.
using ScanKernel = void(Scan op, const char *name, const Tensor &x, int64_t dim, const Tensor &values,
                        const Tensor &indices);
dispatch::DispatchStub<ScanKernel> scan_stub("scan");

/// torch.max/min(a, dim): values and int64 indices.
std::pair<Tensor, Tensor> extreme(const Tensor &a, int64_t dim_in, bool keepdim, bool is_max) {
  const char *op = is_max ? "max" : "min";
  check_input(a, op);
  const int64_t dim = wrap_dim(a, dim_in, op);
  if (a.dim() == 0) return extreme(a.reshape({1}), 0, /*keepdim=*/false, is_max);
  KILN_CHECK(a.size(dim) > 0, op, ": cannot reduce over zero-size dimension ", dim, " of shape ",
             shape_str(a.sizes()));
  // 16-bit floats scan in float32, bool in int64; the values keep a's dtype.
  const DType compute = is_half(a.dtype()) ? kFloat32 : (a.dtype() == kBool ? kInt64 : a.dtype());
  Tensor x = a.to(compute);
  Shape keep_shape = a.sizes();
  keep_shape[dim] = 1;
  Tensor values = Tensor::empty(keep_shape, compute, x.device());
  Tensor indices = Tensor::empty(keep_shape, kInt64, x.device());
  scan_stub(op, x.device().type, is_max ? Scan::Max : Scan::Min, op, x, dim, values, indices);
  // Traced as two nodes over x: kiln.reduce_max/min (values) and
  // kiln.argmax/argmin (indices), both along `dim` with keepdim.
  trace::Attrs attrs;
  attrs.ints = {dim};
  attrs.keepdim = true;
  trace::record(is_max ? ir::OpKind::ReduceMax : ir::OpKind::ReduceMin, {x}, values, attrs);
  trace::record(is_max ? ir::OpKind::ArgMax : ir::OpKind::ArgMin, {x}, indices, attrs);
  if (autograd::any_requires_grad({x})) {
    const Shape in_shape = a.sizes();
    autograd::record(values, is_max ? "MaxBackward" : "MinBackward", {x}, {indices},
                     [in_shape, dim](const TensorList &g, const TensorList &s) -> TensorList {
                       return {place_at_indices(g[0], s[0], in_shape, dim)};
                     });
  }
  values = to_result(values, a.dtype());
  if (!keepdim) return {values.squeeze(dim), indices.squeeze(dim)};
  return {values, indices};
}

/// out = inclusive prefix sums of x along dim (same shape, contiguous);
/// floats accumulate in double, integers in int64.
template <class T> void scan_cumsum(const Tensor &x, int64_t dim, const Tensor &out) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  const Shape out_strides = contiguous_strides(out.sizes());
  const Lines l = lines_along(x.sizes(), x.strides(), out_strides, dim);
  const T *in = reinterpret_cast<const T *>(kernels::storage_base(x));
  T *o = static_cast<T *>(out.raw_data());
  kernels::for_each_row<2>(l.sizes, {&l.a_strides, &l.b_strides}, {x.storage_offset(), 0},
                           [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                             Acc acc = 0;
                             for (int64_t j = 0; j < n; ++j) {
                               acc += in[off[0] + j * st[0]];
                               o[off[1] + j * st[1]] = static_cast<T>(acc);
                             }
                           });
}

void scan_cpu(Scan op, const char *name, const Tensor &x, int64_t dim, const Tensor &values, const Tensor &indices) {
  kernels::dispatch(x.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
    case Scan::Max: scan_extreme<true, T>(x, dim, values, indices); break;
    case Scan::Min: scan_extreme<false, T>(x, dim, values, indices); break;
    case Scan::Cumsum: scan_cumsum<T>(x, dim, values); break;
    }
  });
}
const dispatch::KernelRegistrar<ScanKernel> scan_cpu_reg(scan_stub, DeviceType::CPU, scan_cpu);

/// CUDA: max/min(dim) as the two nodes a trace records (reduce_max/min and
/// argmax/argmin, keepdim) in one generated kernel; cumsum as kiln.cumsum.
void scan_cuda(Scan op, const char *name, const Tensor &x, int64_t dim, const Tensor &values, const Tensor &indices) {
  if (op == Scan::Cumsum) {
    dispatch::run_graph_kernel(name, dispatch::graph_node(ir::OpKind::Cumsum, {dim}), {x}, {values});
    return;
  }
  const bool is_max = op == Scan::Max;
  dispatch::GraphMaker g;
  const int in = g.input(x);
  g.output(g.node(dispatch::graph_node(is_max ? ir::OpKind::ReduceMax : ir::OpKind::ReduceMin, {dim}, true), {in},
                  values.sizes(), dispatch::element_type(values.dtype())));
  g.output(g.node(dispatch::graph_node(is_max ? ir::OpKind::ArgMax : ir::OpKind::ArgMin, {dim}, true), {in},
                  indices.sizes(), ir::ElementType::I64));
  g.run(name, {x}, {values, indices});
}
const dispatch::KernelRegistrar<ScanKernel> scan_cuda_reg(scan_stub, DeviceType::CUDA, scan_cuda);

/// Variance over `dims` as sum((x - mean)^2) / max(0, N - correction), in
/// the compute dtype (float64 stays, everything else float32).
Tensor variance(const Tensor &a, const Shape &dims_in, int64_t correction, bool keepdim, const char *op) {
  check_input(a, op);
  KILN_CHECK(a.is_floating_point(), op, ": expected a floating point input, got ", dtype_name(a.dtype()),
             "; convert with .to(kiln::kFloat32)");
  const Shape dims = wrap_dims(a, dims_in, op);
  const int64_t n = reduced_count(a, dims);
  Tensor x = a.to(a.dtype() == kFloat64 ? kFloat64 : kFloat32);
  Tensor centered = x - mean(x, dims, /*keepdim=*/true);
  // N <= correction divides by 0: inf, or nan for 0/0 (as torch.var).
  const double denom = static_cast<double>(std::max<int64_t>(0, n - correction));
  return sum(centered * centered, dims, keepdim) / denom;
}

/// amax over dims (keepdim, no gradient) with infinities replaced by 0, the
/// shift that keeps logsumexp finite (as PyTorch's logsumexp).
Tensor finite_max(const Tensor &x, const Shape &dims) {
  Tensor m = amax(x.detach(), dims, /*keepdim=*/true);
  Tensor zero = zeros({}, m.dtype());
  m = where(eq(m, full({}, INFINITY, m.dtype())), zero, m);
  return where(eq(m, full({}, -INFINITY, m.dtype())), zero, m);
}

}  // namespace

Tensor var(const Tensor &a, const Shape &dims, int64_t correction, bool keepdim) {
  amp::detail::AutocastOp ac("var");
  if (ac) return var(ac.cast(a), dims, correction, keepdim);
  return to_result(variance(a, dims, correction, keepdim, "var"), a.dtype());
}

Tensor std(const Tensor &a, const Shape &dims, int64_t correction, bool keepdim) {
  amp::detail::AutocastOp ac("std");
  if (ac) return std(ac.cast(a), dims, correction, keepdim);
  return to_result(sqrt(variance(a, dims, correction, keepdim, "std")), a.dtype());
}

std::pair<Tensor, Tensor> max(const Tensor &a, int64_t dim, bool keepdim) { return extreme(a, dim, keepdim, true); }
std::pair<Tensor, Tensor> min(const Tensor &a, int64_t dim, bool keepdim) { return extreme(a, dim, keepdim, false); }

Tensor logsumexp(const Tensor &a, const Shape &dims_in, bool keepdim) {
  amp::detail::AutocastOp ac("logsumexp");
  if (ac) return logsumexp(ac.cast(a), dims_in, keepdim);
  check_input(a, "logsumexp");
  KILN_CHECK(a.dtype() != kBool, "logsumexp: not supported for bool tensors; convert with .to(kiln::kFloat32) first");
  const Shape dims = wrap_dims(a, dims_in, "logsumexp");
  const DType result = a.is_floating_point() ? a.dtype() : kFloat32;
  Tensor x = a.to(result == kFloat64 ? kFloat64 : kFloat32);
  if (x.numel() == 0)  // an empty sum: log(0) = -inf, no shift needed
    return to_result(log(sum(exp(x), dims, keepdim)), result);
  // log(sum(exp(x - m))) + m with m = max(x) detached: the gradient is
  // softmax(x) either way, and exp never overflows.
  Tensor shift = finite_max(x, dims);
  Tensor out = log(sum(exp(x - shift), dims, /*keepdim=*/true)) + shift;
  if (!keepdim) out = out.reshape(reduced_shape(a.sizes(), dims, false));
  return to_result(out, result);
}

Tensor cumsum(const Tensor &a, int64_t dim_in) {
  amp::detail::AutocastOp ac("cumsum");
  if (ac) return cumsum(ac.cast(a), dim_in);
  check_input(a, "cumsum");
  const int64_t dim = wrap_dim(a, dim_in, "cumsum");
  // Integers and bool accumulate into int64 (as torch.cumsum); 16-bit floats in float32.
  const DType result = a.is_floating_point() ? a.dtype() : kInt64;
  Tensor x = a.to(is_half(result) ? kFloat32 : result);
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  scan_stub("cumsum", x.device().type, Scan::Cumsum, "cumsum", x, dim, out, Tensor());
  trace::Attrs attrs;
  attrs.ints = {dim};
  trace::record(ir::OpKind::Cumsum, {x}, out, attrs);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "CumsumBackward", {x}, {}, [dim](const TensorList &g, const TensorList &) -> TensorList {
      // The reversed prefix sum sum_{j >= i} g_j = total - cumsum(g)_i + g_i.
      return {sum(g[0], {dim}, /*keepdim=*/true) - cumsum(g[0], dim) + g[0]};
    });
  return to_result(out, result);
}

}  // namespace kiln
