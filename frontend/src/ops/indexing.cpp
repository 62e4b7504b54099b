// Indexing and joining: gather, scatter_add, index_select, slice with a step,
// cat, stack, split, chunk (PyTorch semantics).
//
// gather/scatter_add/cat are primitive kernels; index_select, stack, split and
// chunk are compositions (gather, cat, narrow), so they need no backward of
// their own. gather and scatter_add are captured (kiln.gather,
// kiln.scatter_add) and their indices checked on every compiled call. Under
// a trace, the strided windows (narrow, slice with a step: eager views) are
// recorded as kiln.gather of a constant position index, their gradients as
// kiln.scatter_add into zeros, and a float cat is computed as scatter_adds
// of its operands into zeros, so all of them are captured. Pure data movement (gather, cat) copies elements bytewise and so
// works for every dtype without a float32 round trip; scatter_add adds, so
// float16/bfloat16 are widened to float32 around its kernel.
#include <algorithm>
#include <cstring>
#include <optional>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/runtime/IndexCheck.h"
#include "../backend.h"
#include "dispatch.h"
#include "gather.h"
#include "kernels.h"
#include "shape_utils.h"
#include "../trace.h"

namespace kiln {
namespace {

using shape_utils::strided_view;

using autograd::TensorList;

int64_t wrap_dim(int64_t d, int64_t ndim, const char *op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  KILN_CHECK(d >= -n && d < n, op, ": dimension ", d, " out of range for a ", ndim, "-d tensor (expected ", -n,
             "..", n - 1, ")");
  return d < 0 ? d + n : d;
}

void check_input(const Tensor &t, const char *op, const char *what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

void check_index_dtype(const Tensor &index, const char *op) {
  check_input(index, op, "index");
  KILN_CHECK(index.dtype() == kInt64, op, ": expected index of dtype int64, got ", dtype_name(index.dtype()));
}

bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }

/// Checks the index-vs-tensor shape rule shared by gather and scatter_add:
/// same rank, and index.size(d) <= t.size(d) for every d != dim (or every d
/// when `all_dims`).
void check_index_shape(const Tensor &index, const Tensor &t, int64_t dim, bool all_dims, const char *op,
                       const char *what) {
  KILN_CHECK(index.dim() == t.dim(), op, ": index ", shape_str(index.sizes()), " must have the same rank as ", what,
             " ", shape_str(t.sizes()));
  for (int64_t d = 0; d < t.dim(); ++d)
    KILN_CHECK((d == dim && !all_dims) || index.size(d) <= t.size(d), op, ": index ", shape_str(index.sizes()),
               " is larger than ", what, " ", shape_str(t.sizes()), " in dimension ", d);
}

/// `strides` with the entry of `dim` replaced by 0 (the index supplies it).
Shape strides_without(const Tensor &t, int64_t dim) {
  Shape s = t.strides();
  if (!s.empty()) s[dim] = 0;
  return s;
}

/// Reads index[k] and throws naming `op` when outside [0, size), with the
/// message compiled calls raise (runtime::index_error).
int64_t checked_index(const int64_t *p, int64_t k, int64_t size, int64_t dim, const char *op) {
  const int64_t v = p[k];
  KILN_CHECK(v >= 0 && v < size, runtime::index_error({op, dim, size}, v));
  return v;
}

/// The kernel of gather: out (contiguous, index's shape) = a[.., index, ..].
void gather_kernel(const Tensor &a, int64_t dim, const Tensor &index, const Tensor &out, const char *op) {
  const size_t item = itemsize(a.dtype());
  const char *pa = kernels::storage_base(a);
  const int64_t *pi = reinterpret_cast<const int64_t *>(kernels::storage_base(index));
  char *po = static_cast<char *>(out.raw_data());
  const Shape sa = strides_without(a, dim);
  const int64_t step = a.dim() ? a.stride(dim) : 0, size = a.dim() ? a.size(dim) : 1;
  int64_t w = 0;
  kernels::for_each_row<2>(index.sizes(), {&sa, &index.strides()}, {a.storage_offset(), index.storage_offset()},
                           [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                             for (int64_t i = 0; i < n; ++i, ++w) {
                               const int64_t k = checked_index(pi, off[1] + i * st[1], size, dim, op);
                               std::memcpy(po + w * item, pa + (off[0] + i * st[0] + k * step) * item, item);
                             }
                           });
}

/// The kernel of scatter_add: out[.., index, ..] += src, out contiguous.
template <class T> void scatter_add_kernel(const Tensor &out, int64_t dim, const Tensor &index, const Tensor &src) {
  T *po = static_cast<T *>(out.raw_data());
  const T *ps = reinterpret_cast<const T *>(kernels::storage_base(src));
  const int64_t *pi = reinterpret_cast<const int64_t *>(kernels::storage_base(index));
  const Shape so = strides_without(out, dim);
  const int64_t step = out.dim() ? out.stride(dim) : 0, size = out.dim() ? out.size(dim) : 1;
  kernels::for_each_row<3>(index.sizes(), {&so, &index.strides(), &src.strides()},
                           {int64_t{0}, index.storage_offset(), src.storage_offset()},
                           [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
                             for (int64_t i = 0; i < n; ++i) {
                               const int64_t k = checked_index(pi, off[1] + i * st[1], size, dim, "scatter_add");
                               po[off[0] + i * st[0] + k * step] += ps[off[2] + i * st[2]];
                             }
                           });
}

/// Zero-pads `g` at the end of each dim up to `shape` (differentiable: cat).
Tensor pad_to(const Tensor &g, const Shape &shape) {
  Tensor r = g;
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (r.size(d) == shape[d]) continue;
    Shape zshape = r.sizes();
    zshape[d] = shape[d] - r.size(d);
    r = cat({r, zeros(zshape, g.dtype(), g.device())}, d);
  }
  return r;
}

/// Copies `src` into the region of `dst` (contiguous) starting at `offset`
/// elements, whose layout is src's sizes with dst's strides. Same dtype.
void copy_region(const Tensor &src, const Tensor &dst, int64_t offset) {
  const size_t item = itemsize(src.dtype());
  const char *ps = kernels::storage_base(src);
  char *pd = static_cast<char *>(dst.raw_data());
  kernels::for_each_row<2>(src.sizes(), {&dst.strides(), &src.strides()}, {offset, src.storage_offset()},
                           [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                             if (st[0] == 1 && st[1] == 1) {
                               std::memcpy(pd + off[0] * item, ps + off[1] * item, n * item);
                               return;
                             }
                             for (int64_t i = 0; i < n; ++i)
                               std::memcpy(pd + (off[0] + i * st[0]) * item, ps + (off[1] + i * st[1]) * item, item);
                           });
}

/// The indexing kernels of this file.
enum class Ix { Gather, ScatterAdd, CopyRegion };

/// Gather: out = x[.., index, ..] along `arg` (the dim). ScatterAdd:
/// out[.., index, ..] += x along `arg`. CopyRegion: x into the region of
/// out starting `arg` elements in (index undefined). One device, out
/// contiguous. `name`: the op an out-of-range index error names.
using IndexKernel = void(Ix op, const Tensor &x, const Tensor &index, int64_t arg, const Tensor &out,
                         const char *name);
dispatch::DispatchStub<IndexKernel> index_stub("indexing");

void index_cpu(Ix op, const Tensor &x, const Tensor &index, int64_t arg, const Tensor &out, const char *name) {
  switch (op) {
  case Ix::Gather: gather_kernel(x, arg, index, out, name); break;
  case Ix::ScatterAdd:
    kernels::dispatch(out.dtype(), "scatter_add", [&](auto zero) {
      scatter_add_kernel<decltype(zero)>(out, arg, index, x);
    });
    break;
  case Ix::CopyRegion: copy_region(x, out, arg); break;
  }
}
const dispatch::KernelRegistrar<IndexKernel> index_cpu_reg(index_stub, DeviceType::CPU, index_cpu);

/// The IndexSource a gather's error names.
ir::IndexSource index_source(const char *name) {
  const std::string n = name;
  return n == "embedding" ? ir::IndexSource::Embedding
         : n == "index_select" ? ir::IndexSource::IndexSelect : ir::IndexSource::Gather;
}

/// CopyRegion on a device: `src` (made contiguous) into the region of the
/// contiguous `dst` at element `offset`, as one device copy per contiguous
/// chunk: the region is contiguous from the first dim whose later dims all
/// span dst.
void copy_region_device(const Tensor &src, const Tensor &dst, int64_t offset) {
  Tensor c = src.is_contiguous() ? src : Tensor::empty(src.sizes(), src.dtype(), src.device());
  if (!src.is_contiguous()) kernels::copy_into_contiguous(src, c);
  const int64_t rank = src.dim();
  int64_t k = rank - 1;
  while (k > 0 && src.size(k) == dst.size(k)) --k;
  const int64_t chunk = rank == 0 ? 1 : src.size(k) * dst.stride(k);
  int64_t outer = 1;
  for (int64_t d = 0; d < k; ++d) outer *= src.size(d);
  const size_t item = itemsize(src.dtype());
  runtime::DeviceBackend &backend = backend_of(dst.device(), "cat");
  std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(k, 0)), 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = offset;
    for (int64_t d = 0; d < k; ++d) at += idx[d] * dst.stride(d);
    backend.copy(static_cast<char *>(dst.raw_data()) + at * static_cast<int64_t>(item), dst.device(),
                 static_cast<const char *>(c.raw_data()) + o * chunk * static_cast<int64_t>(item), c.device(),
                 static_cast<size_t>(chunk) * item);
    for (int64_t d = k - 1; d >= 0 && ++idx[d] == src.size(d); --d) idx[d] = 0;
  }
}

/// CUDA: gather and scatter_add as their dialect ops (index checks through
/// the kernel's status word); cat's regions as device copies.
void index_cuda(Ix op, const Tensor &x, const Tensor &index, int64_t arg, const Tensor &out, const char *name) {
  switch (op) {
  case Ix::Gather:
    dispatch::run_graph_kernel(
        name, dispatch::graph_node(ir::OpKind::Gather, {arg, static_cast<int64_t>(index_source(name))}), {x, index},
        {out});
    break;
  case Ix::ScatterAdd:
    dispatch::run_graph_kernel(name, dispatch::graph_node(ir::OpKind::ScatterAdd, {arg}), {out, index, x}, {out});
    break;
  case Ix::CopyRegion: copy_region_device(x, out, arg); break;
  }
}
const dispatch::KernelRegistrar<IndexKernel> index_cuda_reg(index_stub, DeviceType::CUDA, index_cuda);

/// Output shape of cat, checking ranks and the non-cat sizes. Legacy 1-D
/// empty tensors ([0]) are skipped as in PyTorch; `used` lists the others.
Shape cat_shape(const std::vector<Tensor> &ts, int64_t *dim, std::vector<Tensor> *used) {
  std::vector<size_t> position;  // index of each used tensor in `ts`
  for (size_t i = 0; i < ts.size(); ++i) {
    check_input(ts[i], "cat", "a tensor in the list");
    KILN_CHECK(ts[i].dim() > 0, "cat: zero-dimensional tensor (at position ", i, ") cannot be concatenated");
    if (ts[i].dim() == 1 && ts[i].size(0) == 0) continue;
    used->push_back(ts[i]);
    position.push_back(i);
  }
  if (used->empty()) return ts[0].sizes();
  const Tensor &first = (*used)[0];
  *dim = wrap_dim(*dim, first.dim(), "cat");
  Shape out = first.sizes();
  out[*dim] = 0;
  for (size_t k = 0; k < used->size(); ++k) {
    const Tensor &t = (*used)[k];
    const size_t i = position[k];
    KILN_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has rank ", t.dim(), " (shape ", shape_str(t.sizes()),
               ") but tensor ", position[0], " has rank ", first.dim(), " (shape ", shape_str(first.sizes()), ")");
    for (int64_t d = 0; d < t.dim(); ++d)
      KILN_CHECK(d == *dim || t.size(d) == first.size(d), "cat: sizes of tensors must match except in dimension ",
                 *dim, "; expected size ", first.size(d), " but got size ", t.size(d), " for tensor ", i,
                 " in dimension ", d, " (shapes ", shape_str(first.sizes()), " and ", shape_str(t.sizes()), ")");
    out[*dim] += t.size(*dim);
  }
  return out;
}

/// Whether a traced cat of `used` is captured (cat_as_scatters): float
/// operands (scatter_add adds), none empty (no dialect form).
bool capturable_cat(const std::vector<Tensor> &used, DType dtype) {
  if (!is_floating_point(dtype)) return false;
  return std::none_of(used.begin(), used.end(), [](const Tensor &t) { return t.numel() == 0; });
}

/// cat as captured ops: each operand scatter-added into its slab of a zero
/// tensor of `out_shape` (the same values as the copy: 0 + x is x). Its
/// backward is scatter_add's: a gather of each slab.
Tensor cat_as_scatters(const TensorList &inputs, const Shape &out_shape, int64_t dim) {
  Tensor out = zeros(out_shape, inputs[0].dtype(), inputs[0].device());
  int64_t offset = 0;
  for (const Tensor &t : inputs) {
    out = scatter_add(out, dim, detail::window_index(t.sizes(), dim, offset, 1, t.device()), t);
    offset += t.size(dim);
  }
  return out;
}

}  // namespace

namespace detail {

Tensor gather_as(const Tensor &a, int64_t dim_in, const Tensor &index, ir::IndexSource source) {
  const char *op = ir::toString(source);
  // A 0-d gather has no dialect form (kiln.gather indexes a dimension).
  std::optional<trace::GraphBreak> graph_break;
  if (a.defined() && a.dim() == 0) graph_break.emplace("gather");
  check_input(a, op, "input");
  check_index_dtype(index, op);
  const int64_t dim = wrap_dim(dim_in, a.dim(), op);
  check_index_shape(index, a, dim, /*all_dims=*/false, op, "input");
  const Device device = dispatch::common_device(op, {&a, &index});
  Tensor out = Tensor::empty(index.sizes(), a.dtype(), device);
  if (!trace::skip_compute()) index_stub(op, device.type, Ix::Gather, a, index, dim, out, op);
  trace::record(ir::OpKind::Gather, {a, index}, out, trace::Attrs{{dim, static_cast<int64_t>(source)}});
  if (autograd::any_requires_grad({a})) {
    const Shape in_shape = a.sizes();
    autograd::record(out, "GatherBackward", {a}, {index},
                     [in_shape, dim](const TensorList &g, const TensorList &s) -> TensorList {
                       return {scatter_add(zeros(in_shape, g[0].dtype(), g[0].device()), dim, s[0], g[0])};
                     });
  }
  return out;
}

Tensor window_index(const Shape &shape, int64_t dim, int64_t start, int64_t step, Device device) {
  std::vector<int64_t> positions(shape[dim]);
  for (int64_t k = 0; k < shape[dim]; ++k) positions[k] = start + k * step;
  Shape line(shape.size(), 1);
  line[dim] = shape[dim];
  return tensor(positions, {shape[dim]}, device).reshape(line).expand(shape);
}

void record_window(const Tensor &a, int64_t dim, int64_t start, int64_t step, const Tensor &out) {
  if (!trace::active()) return;
  const Tensor index = window_index(out.sizes(), dim, start, step, a.device());
  trace::record(ir::OpKind::Gather, {a, index}, out, trace::Attrs{{dim, static_cast<int64_t>(ir::IndexSource::Gather)}});
}

Tensor unwindow(const Tensor &g, const Shape &in_shape, int64_t dim, int64_t start, int64_t step) {
  const Tensor index = window_index(g.sizes(), dim, start, step, g.device());
  return scatter_add(zeros(in_shape, g.dtype(), g.device()), dim, index, g);
}

}  // namespace detail

Tensor gather(const Tensor &a, int64_t dim, const Tensor &index) {
  return detail::gather_as(a, dim, index, ir::IndexSource::Gather);
}

Tensor scatter_add(const Tensor &a, int64_t dim_in, const Tensor &index, const Tensor &src) {
  std::optional<trace::GraphBreak> graph_break;  // a 0-d scatter_add has no dialect form
  if (a.defined() && a.dim() == 0) graph_break.emplace("scatter_add");
  check_input(a, "scatter_add", "input");
  check_input(src, "scatter_add", "src");
  check_index_dtype(index, "scatter_add");
  KILN_CHECK(a.dtype() == src.dtype(), "scatter_add: expected src of the input's dtype ", dtype_name(a.dtype()),
             ", got ", dtype_name(src.dtype()));
  KILN_CHECK(a.dtype() != kBool, "scatter_add: bool tensors are not supported; convert with .to() first");
  const int64_t dim = wrap_dim(dim_in, a.dim(), "scatter_add");
  check_index_shape(index, a, dim, /*all_dims=*/false, "scatter_add", "input");
  check_index_shape(index, src, dim, /*all_dims=*/true, "scatter_add", "src");
  const DType compute = is_half(a.dtype()) ? kFloat32 : a.dtype();
  const Device device = dispatch::common_device("scatter_add", {&a, &index, &src});
  Tensor x = a.to(compute), y = src.to(compute);
  Tensor out = Tensor::empty(a.sizes(), compute, device);
  kernels::copy_into_contiguous(x, out);
  if (!trace::skip_compute()) index_stub("scatter_add", device.type, Ix::ScatterAdd, y, index, dim, out, "scatter_add");
  trace::record(ir::OpKind::ScatterAdd, {x, index, y}, out, trace::Attrs{{dim}});
  if (autograd::any_requires_grad({x, y})) {
    const Shape src_shape = src.sizes();
    autograd::record(out, "ScatterAddBackward", {x, y}, {index},
                     [dim, src_shape](const TensorList &g, const TensorList &s) -> TensorList {
                       // Positions of src not named by index get no gradient.
                       Tensor gs = gather(g[0], dim, s[0]);
                       return {g[0], gs.sizes() == src_shape ? gs : pad_to(gs, src_shape)};
                     });
  }
  return compute != a.dtype() ? out.to(a.dtype()) : out;
}

Tensor index_select(const Tensor &a, int64_t dim_in, const Tensor &index) {
  check_input(a, "index_select", "input");
  check_input(index, "index_select", "index");
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32,
             "index_select: expected index of dtype int64 or int32, got ", dtype_name(index.dtype()));
  KILN_CHECK(index.dim() <= 1, "index_select: index must be 0-d or 1-d, got shape ", shape_str(index.sizes()));
  const int64_t dim = wrap_dim(dim_in, a.dim(), "index_select");
  if (a.dim() == 0) return index_select(a.reshape({1}), 0, index).reshape({});
  Tensor idx = index.to(kInt64).reshape({-1});
  // out = gather(a, dim, index broadcast along every other dim); the gather
  // checks the range (in eager and in every compiled call).
  Shape line(a.dim(), 1), out_shape = a.sizes();
  line[dim] = idx.numel();
  out_shape[dim] = idx.numel();
  return detail::gather_as(a, dim, idx.reshape(line).expand(out_shape), ir::IndexSource::IndexSelect);
}

Tensor slice(const Tensor &a, int64_t dim_in, int64_t start, int64_t end, int64_t step) {
  check_input(a, "slice", "input");
  KILN_CHECK(a.dim() > 0, "slice: cannot be applied to a 0-dim tensor");
  KILN_CHECK(step >= 1, "slice: step must be positive, got ", step);
  const int64_t d = wrap_dim(dim_in, a.dim(), "slice");
  if (step == 1) return a.slice(d, start, end);
  const int64_t size = a.size(d);
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Shape sizes = a.sizes(), strides = a.strides();
  sizes[d] = (end - start + step - 1) / step;  // ceil((end - start) / step)
  strides[d] *= step;
  std::optional<trace::GraphBreak> graph_break;  // an empty window has no dialect form
  if (numel_of(sizes) == 0) graph_break.emplace("slice");
  Tensor out = strided_view(a, sizes, strides, a.storage_offset() + start * a.stride(d));
  detail::record_window(a, d, start, step, out);  // captured as a kiln.gather
  if (autograd::any_requires_grad({a})) {
    const Shape in_shape = a.sizes();
    autograd::record(out, "SliceBackward", {a}, {},
                     [in_shape, d, start, step](const TensorList &g, const TensorList &) -> TensorList {
                       return {detail::unwindow(g[0], in_shape, d, start, step)};
                     });
  }
  return out;
}

Tensor cat(const std::vector<Tensor> &tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  std::vector<Tensor> used;
  const Shape out_shape = cat_shape(tensors, &dim, &used);
  DType dtype = tensors[0].dtype();
  for (const Tensor &t : tensors) dtype = promote_types(dtype, t.dtype());
  const Device device = dispatch::common_device("cat", tensors);
  if (used.empty()) return Tensor::empty(out_shape, dtype, device);
  if (trace::active() && capturable_cat(used, dtype)) {
    TensorList inputs;
    for (const Tensor &t : used) inputs.push_back(t.to(dtype));
    return cat_as_scatters(inputs, out_shape, dim);
  }
  trace::GraphBreak graph_break("cat");  // ints, bools, empty operands: run eagerly between compiled segments
  TensorList inputs;
  for (const Tensor &t : used) inputs.push_back(t.to(dtype));
  Tensor out = Tensor::empty(out_shape, dtype, device);
  Shape lengths;
  int64_t offset = 0;
  for (const Tensor &t : inputs) {
    index_stub("cat", device.type, Ix::CopyRegion, t, Tensor(), offset * out.stride(dim), out, "cat");
    lengths.push_back(t.size(dim));
    offset += t.size(dim);
  }
  if (autograd::any_requires_grad(inputs))
    autograd::record(out, "CatBackward", inputs, {}, [dim, lengths](const TensorList &g, const TensorList &) -> TensorList {
      TensorList grads;
      int64_t start = 0;
      for (int64_t len : lengths) {
        grads.push_back(g[0].narrow(dim, start, len));
        start += len;
      }
      return grads;
    });
  return out;
}

Tensor stack(const std::vector<Tensor> &tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (const Tensor &t : tensors) check_input(t, "stack", "a tensor in the list");
  const Shape &first = tensors[0].sizes();
  for (size_t i = 1; i < tensors.size(); ++i)
    KILN_CHECK(tensors[i].sizes() == first, "stack: expects each tensor to be equal size, but got ", shape_str(first),
               " at entry 0 and ", shape_str(tensors[i].sizes()), " at entry ", i);
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor &t : tensors) parts.push_back(t.unsqueeze(d));
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor &a, int64_t split_size, int64_t dim) {
  check_input(a, "split", "input");
  KILN_CHECK(a.dim() > 0, "split: expects at least a 1-dimensional tensor, got shape []");
  const int64_t d = wrap_dim(dim, a.dim(), "split");
  const int64_t size = a.size(d);
  KILN_CHECK(split_size > 0 || (split_size == 0 && size == 0), "split: split_size must be positive, got ",
             split_size, " for dimension ", d, " of size ", size);
  std::vector<Tensor> pieces;
  if (size == 0) return {a.narrow(d, 0, 0)};
  for (int64_t start = 0; start < size; start += split_size)
    pieces.push_back(a.narrow(d, start, std::min(split_size, size - start)));
  return pieces;
}

std::vector<Tensor> chunk(const Tensor &a, int64_t chunks, int64_t dim) {
  check_input(a, "chunk", "input");
  KILN_CHECK(a.dim() > 0, "chunk: expects at least a 1-dimensional tensor, got shape []");
  KILN_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  const int64_t d = wrap_dim(dim, a.dim(), "chunk");
  const int64_t size = a.size(d);
  if (size == 0) {
    std::vector<Tensor> pieces;
    for (int64_t i = 0; i < chunks; ++i) pieces.push_back(a.narrow(d, 0, 0));
    return pieces;
  }
  return split(a, (size + chunks - 1) / chunks, d);
}

Tensor select(const Tensor &a, int64_t dim, int64_t index) {
  check_input(a, "select", "input");
  KILN_CHECK(a.dim() > 0, "select: cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim(dim, a.dim(), "select");
  const int64_t size = a.size(d);
  KILN_CHECK(index >= -size && index < size, "select: index ", index, " is out of range for dimension ", d,
             " of size ", size, " (expected -", size, " <= index < ", size, ")");
  if (index < 0) index += size;
  return a.narrow(d, index, 1).squeeze(d);
}

std::vector<Tensor> unbind(const Tensor &a, int64_t dim) {
  check_input(a, "unbind", "input");
  KILN_CHECK(a.dim() > 0, "unbind: cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim(dim, a.dim(), "unbind");
  std::vector<Tensor> slices;
  for (int64_t i = 0; i < a.size(d); ++i) slices.push_back(select(a, d, i));
  return slices;
}

}  // namespace kiln
