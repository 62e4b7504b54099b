// View and layout ops: view, reshape, transpose, permute, expand, narrow,
// unsqueeze/squeeze/flatten, contiguous, clone, to(dtype), to(device); the
// copy/convert kernel table.
#include <algorithm>
#include <numeric>
#include <optional>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "dispatch.h"
#include "gather.h"
#include "kernels.h"
#include "shape_utils.h"
#include "../backend.h"
#include "../trace.h"

namespace kiln {
namespace {

constexpr auto make_view = shape_utils::strided_view;

int64_t wrap(int64_t d, int64_t ndim, const char *op) {
  int64_t n = std::max<int64_t>(ndim, 1);
  KILN_CHECK(d >= -n && d < n, op, ": dimension ", d, " out of range for a ", ndim,
             "-d tensor (expected ", -n, "..", n - 1, ")");
  return d < 0 ? d + n : d;
}


/// Resolves one -1 in `shape` so the element count matches `numel`.
Shape infer_size(const Shape &shape, int64_t numel, const char *op, const Shape &from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      KILN_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in shape ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
               " is invalid for input of shape ", shape_str(from), " (", numel, " elements)");
    out[infer] = numel / known;
  } else {
    KILN_CHECK(known == numel, op, ": shape ", shape_str(shape), " is invalid for input of shape ",
               shape_str(from), " (", numel, " elements)");
  }
  return out;
}

/// Strides that let a tensor of (old_sizes, old_strides) be viewed as
/// new_sizes without copying, or nullopt (PyTorch's computeStride).
std::optional<Shape> view_strides(const Shape &old_sizes, const Shape &old_strides, const Shape &new_sizes) {
  Shape new_strides(new_sizes.size(), 1);
  if (old_sizes.empty()) return new_strides;
  if (numel_of(old_sizes) == 0) return contiguous_strides(new_sizes);
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    if (tensor_d == 0 || (old_sizes[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

/// Records autograd + trace for a reshape-like view of `self` as `out`.
void record_reshape(const Tensor &self, const Tensor &out) {
  trace::record(ir::OpKind::Reshape, {self}, out);
  if (autograd::any_requires_grad({self})) {
    Shape in_shape = self.sizes();
    autograd::record(out, "ViewBackward", {self}, {},
                     [in_shape](const autograd::TensorList &g, const autograd::TensorList &) -> autograd::TensorList {
                       return {g[0].reshape(in_shape)};
                     });
  }
}

}  // namespace

Tensor Tensor::view(const Shape &shape) const {
  Shape sizes = infer_size(shape, numel(), "view", this->sizes());
  auto strides = view_strides(this->sizes(), this->strides(), sizes);
  KILN_CHECK(strides.has_value(), "view: size ", shape_str(sizes),
             " is not compatible with input sizes ", shape_str(this->sizes()), " and strides ",
             shape_str(this->strides()),
             " (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead");
  Tensor out = make_view(*this, sizes, *strides, storage_offset());
  record_reshape(*this, out);
  return out;
}

Tensor Tensor::reshape(const Shape &shape) const {
  Shape sizes = infer_size(shape, numel(), "reshape", this->sizes());
  if (view_strides(this->sizes(), this->strides(), sizes)) return view(sizes);
  return contiguous().view(sizes);
}

Tensor Tensor::permute(const Shape &dims) const {
  const int64_t n = dim();
  KILN_CHECK(static_cast<int64_t>(dims.size()) == n, "permute: number of dims ", dims.size(),
             " does not match tensor rank ", n, " (shape ", shape_str(sizes()), ")");
  Shape perm(n), new_sizes(n), new_strides(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap(dims[i], n, "permute");
    KILN_CHECK(!seen[d], "permute: repeated dim ", d, " in ", shape_str(dims));
    seen[d] = true;
    perm[i] = d;
    new_sizes[i] = sizes()[d];
    new_strides[i] = strides()[d];
  }
  Tensor out = make_view(*this, new_sizes, new_strides, storage_offset());
  trace::record(ir::OpKind::Transpose, {*this}, out, trace::Attrs{perm});
  if (autograd::any_requires_grad({*this})) {
    Shape inverse(n);
    for (int64_t i = 0; i < n; ++i) inverse[perm[i]] = i;
    autograd::record(out, "PermuteBackward", {*this}, {},
                     [inverse](const autograd::TensorList &g, const autograd::TensorList &) -> autograd::TensorList {
                       return {g[0].permute(inverse)};
                     });
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  int64_t n = dim();
  int64_t a = wrap(dim0, n, "transpose"), b = wrap(dim1, n, "transpose");
  if (n == 0) return *this;
  Shape perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[a], perm[b]);
  return permute(perm);
}

Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dimensions, got shape ", shape_str(sizes()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::expand(const Shape &shape) const {
  const int64_t n = static_cast<int64_t>(shape.size()), m = dim();
  KILN_CHECK(n >= m, "expand: the number of sizes provided (", n,
             ") must be greater or equal to the number of dimensions in the tensor (", m, ")");
  Shape sizes(n), strides(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t j = i - (n - m);
    int64_t target = shape[i];
    if (j >= 0) {
      int64_t have = this->sizes()[j];
      if (target == -1) target = have;
      KILN_CHECK(have == target || have == 1, "expand: the expanded size of the tensor (", target,
                 ") must match the existing size (", have, ") at non-singleton dimension ", i,
                 ". Target sizes: ", shape_str(shape), ". Tensor sizes: ", shape_str(this->sizes()));
      sizes[i] = target;
      strides[i] = have == target ? this->strides()[j] : 0;
    } else {
      KILN_CHECK(target >= 0, "expand: -1 is not allowed in a leading, non-existing dimension; got ",
                 shape_str(shape));
      sizes[i] = target;
      strides[i] = 0;
    }
  }
  if (sizes == this->sizes()) return *this;
  Tensor out = make_view(*this, sizes, strides, storage_offset());
  trace::record(ir::OpKind::Broadcast, {*this}, out);
  if (autograd::any_requires_grad({*this})) {
    Shape in_shape = this->sizes();
    autograd::record(out, "ExpandBackward", {*this}, {},
                     [in_shape](const autograd::TensorList &g, const autograd::TensorList &) -> autograd::TensorList {
                       return {sum_to(g[0], in_shape)};
                     });
  }
  return out;
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  KILN_CHECK(dim() > 0, "narrow: cannot be applied to a 0-dim tensor");
  int64_t d = wrap(dim_, dim(), "narrow");
  int64_t size = sizes()[d];
  if (start < 0) start += size;
  KILN_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow: start (", start,
             ") + length (", length, ") exceeds dimension size (", size, ") of dim ", d);
  Shape new_sizes = sizes();
  new_sizes[d] = length;
  std::optional<trace::GraphBreak> graph_break;  // an empty window has no dialect form
  if (numel_of(new_sizes) == 0) graph_break.emplace("narrow");
  Tensor out = make_view(*this, new_sizes, strides(), storage_offset() + start * strides()[d]);
  detail::record_window(*this, d, start, 1, out);  // captured as a kiln.gather
  if (autograd::any_requires_grad({*this})) {
    Shape in_shape = sizes();
    autograd::record(out, "NarrowBackward", {*this}, {},
                     [in_shape, d, start, length](const autograd::TensorList &g,
                                                  const autograd::TensorList &) -> autograd::TensorList {
                       // The gradient is zero outside the window: pad it back (captured: a scatter_add;
                       // off the cpu too, where generated kernels write row-major outputs only).
                       if (trace::active() || !g[0].device().is_cpu())
                         return {detail::unwindow(g[0], in_shape, d, start, 1)};
                       Tensor full = zeros(in_shape, g[0].dtype());
                       NoGradGuard no_grad;
                       full.narrow(d, start, length).copy_(g[0]);
                       return {full};
                     });
  }
  return out;
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end) const {
  KILN_CHECK(dim() > 0, "slice: cannot be applied to a 0-dim tensor");
  int64_t d = wrap(dim_, dim(), "slice");
  int64_t size = sizes()[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  return narrow(d, start, end - start);
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  int64_t d = wrap(dim_, dim() + 1, "unsqueeze");
  Shape s = sizes();
  s.insert(s.begin() + d, 1);
  return view(s);
}

Tensor Tensor::squeeze(int64_t dim_) const {
  if (dim() == 0) return *this;
  int64_t d = wrap(dim_, dim(), "squeeze");
  if (sizes()[d] != 1) return *this;
  Shape s = sizes();
  s.erase(s.begin() + d);
  return view(s);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t a = wrap(start_dim, dim(), "flatten"), b = wrap(end_dim, dim(), "flatten");
  KILN_CHECK(a <= b, "flatten: start_dim (", a, ") cannot come after end_dim (", b, ")");
  Shape s(sizes().begin(), sizes().begin() + a);
  int64_t prod = 1;
  for (int64_t i = a; i <= b; ++i) prod *= sizes()[i];
  s.push_back(prod);
  s.insert(s.end(), sizes().begin() + b + 1, sizes().end());
  return reshape(s);
}

namespace {

using kernels::for_each_row;
using kernels::load_as_double;
using kernels::storage_base;
using kernels::store_from_double;

/// The copy/convert kernel: `src` (any layout, any dtype) into the
/// contiguous `dst` of the same shape, on one device.
using CopyKernel = void(const Tensor &src, const Tensor &dst);
dispatch::DispatchStub<CopyKernel> copy_stub("copy/convert");

/// dst[i] = src[i * stride] for n elements of `item` bytes (a typed loop:
/// a memcpy call per element was 7% of an eager GPT step).
template <class U> void copy_strided_typed(char *dst, const char *src, int64_t n, int64_t stride) {
  U *__restrict d = reinterpret_cast<U *>(dst);
  const U *__restrict s = reinterpret_cast<const U *>(src);
  for (int64_t i = 0; i < n; ++i) d[i] = s[i * stride];
}

void copy_strided_row(char *dst, const char *src, int64_t n, int64_t stride, size_t item) {
  switch (item) {
  case 1: copy_strided_typed<uint8_t>(dst, src, n, stride); break;
  case 2: copy_strided_typed<uint16_t>(dst, src, n, stride); break;
  case 4: copy_strided_typed<uint32_t>(dst, src, n, stride); break;
  default: copy_strided_typed<uint64_t>(dst, src, n, stride); break;
  }
}

void copy_cpu(const Tensor &src, const Tensor &dst) {
  const char *sbase = storage_base(src);
  char *dbase = static_cast<char *>(dst.raw_data());
  const DType st = src.dtype(), dt = dst.dtype();
  int64_t w = 0;
  if (st == dt) {
    const size_t item = itemsize(st);
    for_each_row<1>(src.sizes(), {&src.strides()}, {src.storage_offset()},
                    [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> s) {
                      if (s[0] == 1) {
                        std::memcpy(dbase + w * item, sbase + off[0] * item, n * item);
                        w += n;
                        return;
                      }
                      copy_strided_row(dbase + w * item, sbase + off[0] * item, n, s[0], item);
                      w += n;
                    });
    return;
  }
  for_each_row<1>(src.sizes(), {&src.strides()}, {src.storage_offset()},
                  [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> s) {
                    for (int64_t i = 0; i < n; ++i, ++w)
                      store_from_double(dbase, dt, w, load_as_double(sbase, st, off[0] + i * s[0]));
                  });
}
const dispatch::KernelRegistrar<CopyKernel> copy_cpu_reg(copy_stub, DeviceType::CPU, copy_cpu);

/// CUDA: kiln.convert (to dst's dtype; the same dtype is a strided copy).
void copy_cuda(const Tensor &src, const Tensor &dst) {
  dispatch::run_graph_kernel("copy", dispatch::graph_node(ir::OpKind::Convert), {src}, {dst});
}
const dispatch::KernelRegistrar<CopyKernel> copy_cuda_reg(copy_stub, DeviceType::CUDA, copy_cuda);

/// Copies the bytes of the contiguous `src` into the contiguous `dst` (same
/// dtype and size) on another device, through the non-cpu side's backend;
/// between two non-cpu devices, through a host buffer.
void copy_across_devices(const Tensor &src, const Tensor &dst) {
  const size_t nbytes = static_cast<size_t>(src.numel()) * itemsize(src.dtype());
  const Device sd = src.device(), dd = dst.device();
  if (sd.is_cpu() || dd.is_cpu()) {
    runtime::DeviceBackend &backend = backend_of(sd.is_cpu() ? dd : sd, "to");
    backend.copy(dst.raw_data(), dd, src.raw_data(), sd, nbytes);
    return;
  }
  Tensor host = Tensor::empty(src.sizes(), src.dtype());
  copy_across_devices(src, host);
  copy_across_devices(host, dst);
}

}  // namespace

namespace kernels {

void copy_into_contiguous(const Tensor &src, const Tensor &dst) {
  if (trace::lazy_value(src)) return;  // no data yet: the compiled segment gives dst its value
  KILN_CHECK(src.device() == dst.device(), "copy: expected all tensors on the same device, got ", src.device().str(),
             " and ", dst.device().str());
  copy_stub("copy", dst.device().type, src, dst);
}

Tensor device_to_host(const Tensor &t) {
  if (t.device().is_cpu()) return t;
  Tensor c = t;
  if (!t.is_contiguous()) {
    c = Tensor::empty(t.sizes(), t.dtype(), t.device());
    copy_into_contiguous(t, c);
  }
  Tensor host = Tensor::empty(t.sizes(), t.dtype());
  copy_across_devices(c, host);
  return host;
}

Tensor host_to_device(const Tensor &host, Device device) {
  if (device == host.device()) return host;
  Tensor out = Tensor::empty(host.sizes(), host.dtype(), device);
  copy_across_devices(host.contiguous(), out);
  return out;
}

}  // namespace kernels

/// A contiguous copy with element type `dtype`; autograd passes the gradient
/// through (converted back to the source type).
static Tensor copy_as(const Tensor &self, DType dtype, const char *name) {
  Tensor out = Tensor::empty(self.sizes(), dtype, self.device());
  kernels::copy_into_contiguous(self, out);
  if (dtype == self.dtype())
    trace::alias(self, out);
  else
    trace::record(ir::OpKind::Convert, {self}, out);
  if (autograd::any_requires_grad({self}) && is_floating_point(dtype)) {
    DType src_type = self.dtype();
    autograd::record(out, name, {self}, {},
                     [src_type](const autograd::TensorList &g, const autograd::TensorList &) -> autograd::TensorList {
      return {g[0].to(src_type)};
    });
  }
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : copy_as(*this, dtype(), "CloneBackward"); }
Tensor Tensor::clone() const { return copy_as(*this, dtype(), "CloneBackward"); }
Tensor Tensor::to(DType dtype) const { return dtype == this->dtype() ? *this : copy_as(*this, dtype, "ToCopyBackward"); }

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  trace::GraphBreak graph_break("to");  // a device copy is not captured: runs eagerly
  Tensor src = contiguous();
  Tensor out = Tensor::empty(sizes(), dtype(), device);
  if (!trace::skip_compute()) copy_across_devices(src, out);
  if (autograd::any_requires_grad({src}) && is_floating_point()) {
    const Device source = this->device();
    autograd::record(out, "ToCopyBackward", {src}, {},
                     [source](const autograd::TensorList &g, const autograd::TensorList &) -> autograd::TensorList {
      return {g[0].to(source)};
    });
  }
  return out;
}

Tensor Tensor::to(Device device, DType dtype) const { return to(dtype).to(device); }

Tensor Tensor::cpu() const { return to(kCPU); }

}  // namespace kiln
