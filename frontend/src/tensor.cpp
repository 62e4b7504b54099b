// Tensor metadata, element access, printing and in-place updates.
#include <memory>
#include <cmath>
#include <iomanip>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kiln/tensor.h"
#include "backend.h"
#include "ops/dispatch.h"
#include "ops/kernels.h"
#include "ops/shape_utils.h"
#include "trace.h"

namespace kiln {

std::string shape_str(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

Shape contiguous_strides(const Shape &sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t numel_of(const Shape &sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

runtime::DeviceBackend &backend_of(const Device &device, const char *op) {
  runtime::DeviceBackend *backend = runtime::find_backend(device.type);
  KILN_CHECK(backend != nullptr, op, ": device ", device.str(),
             " has no backend in this process (expected cpu, or a device whose backend is registered): ",
             runtime::backend_unavailable_reason(device.type));
  KILN_CHECK(device.index >= 0 && device.index < backend->device_count(), op, ": device ", device.str(),
             " does not exist (", backend->device_count(), " ", device_type_name(device.type),
             " device(s))");
  return *backend;
}

Tensor Tensor::empty(const Shape &sizes, DType dtype, Device device) {
  runtime::DeviceBackend &backend = backend_of(device, "empty");
  for (int64_t s : sizes) KILN_CHECK(s >= 0, "empty: negative size in shape ", shape_str(sizes));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = runtime::Buffer::make(static_cast<size_t>(numel_of(sizes)) * itemsize(dtype),
                                        backend.allocator(device.index));
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

const TensorImpl &Tensor::checked() const {
  KILN_CHECK(impl_ != nullptr, "Tensor: operation on an undefined tensor");
  return *impl_;
}

static int64_t wrap_dim(int64_t d, int64_t ndim, const char *op) {
  int64_t n = std::max<int64_t>(ndim, 1);
  KILN_CHECK(d >= -n && d < n, op, ": dimension ", d, " out of range for a ", ndim,
             "-d tensor (expected ", -n, "..", n - 1, ")");
  return d < 0 ? d + n : d;
}

/// A dim of a tensor that has one: wrap_dim accepts -1 and 0 for a 0-d tensor
/// (reductions over "all" dims), but a 0-d tensor has no size to read (as
/// PyTorch's "dimension specified as -1 but tensor has no dimensions").
static int64_t dim_index(const Tensor &t, int64_t d, const char *op) {
  KILN_CHECK(t.defined(), op, "(", d, ") of an undefined tensor");
  KILN_CHECK(t.dim() > 0, op, ": dimension ", d, " specified but the tensor has no dimensions (0-d)");
  return wrap_dim(d, t.dim(), op);
}

int64_t Tensor::size(int64_t d) const { return sizes()[dim_index(*this, d, "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[dim_index(*this, d, "stride")]; }

bool Tensor::is_contiguous() const {
  const auto &s = sizes();
  const auto &st = strides();
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

template <class T> static constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return kFloat32; }
template <> constexpr DType dtype_of<int64_t>() { return kInt64; }
template <> constexpr DType dtype_of<double>() { return kFloat64; }
template <> constexpr DType dtype_of<int32_t>() { return kInt32; }
template <> constexpr DType dtype_of<uint8_t>() { return kBool; }
template <> constexpr DType dtype_of<uint16_t>() { return kFloat16; }

template <class T> T *Tensor::data_ptr() const {
  KILN_CHECK(dtype() == dtype_of<T>() ||
                 (std::is_same_v<T, uint16_t> && (dtype() == kFloat16 || dtype() == kBFloat16)),
             "data_ptr: tensor has dtype ", dtype_name(dtype()), ", requested ",
             dtype_name(dtype_of<T>()));
  return reinterpret_cast<T *>(raw_data());
}
template float *Tensor::data_ptr<float>() const;
template int64_t *Tensor::data_ptr<int64_t>() const;
template double *Tensor::data_ptr<double>() const;
template int32_t *Tensor::data_ptr<int32_t>() const;
template uint8_t *Tensor::data_ptr<uint8_t>() const;
template uint16_t *Tensor::data_ptr<uint16_t>() const;

void *Tensor::raw_data() const {
  const auto &i = checked();
  return static_cast<char *>(i.storage->data()) + i.offset * static_cast<int64_t>(itemsize(i.dtype));
}

/// `t` itself when the host can read its memory, else a copy on the cpu.
static Tensor host_readable(const Tensor &t, const char *op) {
  if (backend_of(t.device(), op).host_accessible()) return t;
  NoGradGuard no_grad;
  return t.cpu();
}

double Tensor::item() const {
  trace::GraphBreak graph_break("item");  // not capturable: runs eagerly between compiled segments
  KILN_CHECK(numel() == 1, "item: a tensor with ", numel(), " elements (shape ", shape_str(sizes()),
             ") cannot be converted to a scalar; expected exactly 1 element");
  const Tensor h = host_readable(*this, "item");  // one element: the copy moves one value
  return kernels::load_as_double(kernels::storage_base(h), h.dtype(), h.storage_offset());
}

template <class T> std::vector<T> Tensor::to_vector() const {
  trace::read_data(*this);  // a lazily traced value gets its value first
  const Tensor h = host_readable(*this, "to_vector");
  return h.host_values<T>();
}

template <class T> std::vector<T> Tensor::host_values() const {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(numel()));
  const char *base = kernels::storage_base(*this);
  const DType t = dtype();
  kernels::for_each_row<1>(sizes(), {&strides()}, {storage_offset()},
                           [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
                             for (int64_t i = 0; i < n; ++i)
                               out.push_back(static_cast<T>(kernels::load_as_double(base, t, off[0] + i * st[0])));
                           });
  return out;
}
template std::vector<float> Tensor::host_values<float>() const;
template std::vector<double> Tensor::host_values<double>() const;
template std::vector<int64_t> Tensor::host_values<int64_t>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

// ---- autograd accessors -----------------------------------------------------

bool Tensor::requires_grad() const {
  const auto &a = checked().autograd;
  return a.requires_grad || a.grad_fn != nullptr;
}

Tensor &Tensor::requires_grad_(bool requires_grad) {
  KILN_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad; this tensor has grad_fn ",
             grad_fn()->name(), ". Use detach() to get a leaf");
  KILN_CHECK(!requires_grad || is_floating_point(), "requires_grad_: only floating point tensors can require "
             "gradients, got dtype ", dtype_name(dtype()));
  impl_->autograd.requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const auto &g = checked().autograd.grad;
  return g ? *g : Tensor();
}

void Tensor::set_grad(const Tensor &g) const {
  checked();
  if (!g.defined()) {
    impl_->autograd.grad.reset();
    return;
  }
  KILN_CHECK(g.sizes() == sizes(), "set_grad: gradient shape ", shape_str(g.sizes()),
             " does not match tensor shape ", shape_str(sizes()));
  impl_->autograd.grad = std::make_shared<Tensor>(g);
}

void Tensor::backward(const Tensor &gradient, bool retain_graph) const {
  KILN_CHECK(requires_grad(), "backward: tensor does not require grad and has no grad_fn; did you call "
             "requires_grad_() on the parameters or run under NoGradGuard?");
  Tensor g = gradient;
  if (!g.defined()) {
    KILN_CHECK(numel() == 1, "backward: grad can be implicitly created only for scalar outputs; got shape ",
               shape_str(sizes()), ". Pass a gradient tensor of that shape");
    g = ones_like(*this);
  }
  KILN_CHECK(g.sizes() == sizes(), "backward: gradient shape ", shape_str(g.sizes()),
             " does not match output shape ", shape_str(sizes()));
  autograd::backward({*this}, {g}, retain_graph);
}

void Tensor::register_hook(std::function<Tensor(const Tensor &)> hook) const {
  KILN_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that doesn't require gradient");
  if (is_leaf())
    autograd::grad_accumulator(*this)->hooks.push_back(std::move(hook));
  else
    grad_fn()->pre_hooks.emplace_back(impl_->autograd.output_nr, std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor &)> hook) const {
  KILN_CHECK(requires_grad() && is_leaf(), "register_post_accumulate_grad_hook: only leaf tensors that require "
             "grad accumulate gradients; got ", is_leaf() ? "a leaf without requires_grad" : "a non-leaf tensor");
  autograd::grad_accumulator(*this)->post_hooks.push_back(std::move(hook));
}

uint64_t Tensor::_version() const { return checked().storage->version.load(); }
void Tensor::bump_version() const { ++checked().storage->version; }

void Tensor::set_data(const Tensor &other) const {
  checked();
  KILN_CHECK(other.defined(), "set_data: source tensor is undefined");
  KILN_CHECK(!is_floating_point() || !requires_grad() || other.is_floating_point(), "set_data: a tensor that "
             "requires grad cannot take integer data (got ", dtype_name(other.dtype()), ")");
  impl_->storage = other.impl()->storage;
  impl_->sizes = other.sizes();
  impl_->strides = other.strides();
  impl_->offset = other.storage_offset();
  impl_->dtype = other.dtype();
  impl_->device = other.device();
}

Tensor Tensor::detach() const {
  const auto &i = checked();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = i.storage;
  impl->sizes = i.sizes;
  impl->strides = i.strides;
  impl->offset = i.offset;
  impl->dtype = i.dtype;
  impl->device = i.device;
  Tensor out(std::move(impl));
  trace::detach(*this, out);
  return out;
}

// ---- printing -----------------------------------------------------------------

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  auto v = to_vector<double>();
  const size_t limit = 20;
  os << "[";
  for (size_t i = 0; i < v.size() && i < limit; ++i) os << (i ? ", " : "") << std::setprecision(6) << v[i];
  if (v.size() > limit) os << ", ...";
  os << "], shape=" << shape_str(sizes()) << ", dtype=" << dtype_name(dtype());
  if (requires_grad()) os << ", requires_grad=true";
  os << ")";
  return os.str();
}

std::ostream &operator<<(std::ostream &os, const Tensor &t) { return os << t.str(); }

// ---- in-place updates (no autograd: refuse tensors that need grad) -------------

/// In-place updates are graph breaks (the caller holds the returned scope
/// for the whole update, so it runs eagerly on real values), except updates
/// of captured state under a whole-graph trace (trace::functionalizes: a
/// module buffer), which the op records with record_functional instead.
static std::unique_ptr<trace::GraphBreak> check_inplace(const Tensor &t, const char *op) {
  KILN_CHECK(!(autograd::GradMode::is_enabled() && t.requires_grad()), op,
             ": in-place update of a tensor that requires grad; wrap it in kiln::NoGradGuard "
             "(as optimizers do) or use the out-of-place op");
  std::unique_ptr<trace::GraphBreak> graph_break;
  if (!trace::functionalizes(t)) graph_break = std::make_unique<trace::GraphBreak>(op);
  t.bump_version();
  return graph_break;
}

/// Under a functionalizing trace: records t's new value `value()` (its
/// out-of-place form, computed before the real update, in t's dtype).
template <class F> static void record_functional(const Tensor &t, F &&value) {
  if (!trace::functionalizes(t)) return;
  NoGradGuard no_grad;
  trace::mutate(t, value().to(t.dtype()));
}

/// Applies f(double current, double other) -> double elementwise in place.
template <class F> static void inplace_apply(const Tensor &t, const Tensor *other, F f) {
  Tensor o;
  if (other) o = other->expand(t.sizes());
  char *base = kernels::storage_base(t);
  const DType dt = t.dtype();
  if (dt == kFloat32 && (!other || o.dtype() == kFloat32)) {
    float *p = reinterpret_cast<float *>(base);
    const float *q = other ? reinterpret_cast<const float *>(kernels::storage_base(o)) : nullptr;
    const Shape zero(t.dim(), 0);
    kernels::for_each_row<2>(t.sizes(), {&t.strides(), other ? &o.strides() : &zero},
                             {t.storage_offset(), other ? o.storage_offset() : 0},
                             [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                               for (int64_t i = 0; i < n; ++i) {
                                 float &x = p[off[0] + i * st[0]];
                                 x = static_cast<float>(f(x, q ? q[off[1] + i * st[1]] : 0.0f));
                               }
                             });
    return;
  }
  const char *obase = other ? kernels::storage_base(o) : nullptr;
  const Shape zero(t.dim(), 0);
  kernels::for_each_row<2>(t.sizes(), {&t.strides(), other ? &o.strides() : &zero},
                           {t.storage_offset(), other ? o.storage_offset() : 0},
                           [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                             for (int64_t i = 0; i < n; ++i) {
                               int64_t a = off[0] + i * st[0];
                               double y = obase ? kernels::load_as_double(obase, o.dtype(), off[1] + i * st[1]) : 0.0;
                               kernels::store_from_double(base, dt, a, f(kernels::load_as_double(base, dt, a), y));
                             }
                           });
}

namespace {

enum class Inplace { Fill, Copy, Add, Mul };

/// t = op(t, other, scalar) in place; `other` (null for fill_/mul_) has t's
/// shape after broadcasting and t's device. Fill: scalar; Copy: other;
/// Add: t + scalar * other; Mul: t * scalar.
using InplaceKernel = void(Inplace op, const Tensor &t, const Tensor *other, double scalar);
dispatch::DispatchStub<InplaceKernel> inplace_stub("in-place update");

void inplace_cpu(Inplace op, const Tensor &t, const Tensor *other, double scalar) {
  switch (op) {
  case Inplace::Fill: inplace_apply(t, nullptr, [scalar](double, double) { return scalar; }); break;
  case Inplace::Copy: inplace_apply(t, other, [](double, double y) { return y; }); break;
  case Inplace::Add: inplace_apply(t, other, [scalar](double x, double y) { return x + scalar * y; }); break;
  case Inplace::Mul: inplace_apply(t, nullptr, [scalar](double x, double) { return x * scalar; }); break;
  }
}
const dispatch::KernelRegistrar<InplaceKernel> inplace_cpu_reg(inplace_stub, DeviceType::CPU, inplace_cpu);

/// CUDA: one generated kernel computing in float64 (as inplace_apply) and
/// writing t's dtype over t itself.
/// `t` with its dims in the order `perm` (a kernel-internal view).
Tensor permuted_view(const Tensor &t, const std::vector<size_t> &perm) {
  Shape sizes, strides;
  for (size_t d : perm) sizes.push_back(t.sizes()[d]), strides.push_back(t.strides()[d]);
  return shape_utils::strided_view(t, sizes, strides, t.storage_offset());
}

/// The order of t's dims by decreasing stride (stable): a dense permuted
/// tensor (a transpose) is contiguous in this order.
std::vector<size_t> dims_by_stride(const Tensor &t) {
  std::vector<size_t> perm(static_cast<size_t>(t.dim()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
  std::stable_sort(perm.begin(), perm.end(), [&](size_t a, size_t b) { return t.stride(a) > t.stride(b); });
  return perm;
}

/// dst = src converted to dst's dtype, one generated kernel (kiln.convert;
/// an explicit node also for the same dtype, a strided copy); `dst` is
/// contiguous, `src` any layout of dst's shape on dst's device.
void copy_kernel_into_contiguous(const Tensor &dst, const Tensor &src) {
  dispatch::run_graph_kernel("copy_", dispatch::graph_node(ir::OpKind::Convert), {src}, {dst});
}

/// Above this many dense pieces a non-dense CUDA destination is written
/// through the host instead (one kernel launch per piece costs ~3 us on a
/// GPU, a host round trip of the destination's span ~2 transfers).
constexpr int64_t kMaxCopyPieces = 64;

/// copy_ into the CUDA tensor `dst` through the host: the span of storage
/// dst covers is read, updated by the CPU's copy_ loop and written back whole
/// (the span's elements outside dst go back unchanged, in stream order).
void copy_through_host(const Tensor &dst, const Tensor &src) {
  if (dst.numel() == 0) return;
  int64_t span = 1;
  for (int64_t k = 0; k < dst.dim(); ++k) span += (dst.size(k) - 1) * dst.stride(k);
  Tensor device_span = shape_utils::strided_view(dst, {span}, {1}, dst.storage_offset());
  Tensor host = kernels::device_to_host(device_span);
  Tensor host_src = kernels::device_to_host(src);
  inplace_cpu(Inplace::Copy, shape_utils::strided_view(host, dst.sizes(), dst.strides(), 0), &host_src, 0.0);
  backend_of(dst.device(), "copy_")
      .copy(device_span.raw_data(), dst.device(), host.raw_data(), kCPU,
            static_cast<size_t>(span) * itemsize(dst.dtype()));
}

/// copy_ of `src_in` (dst's device, broadcastable to dst's shape, any
/// dtype) into the CUDA tensor `dst` of any non-overlapping layout, bit for
/// bit as the CPU's loop (kiln.convert rounds as the CPU target):
/// - a dense destination (contiguous up to a permutation of its dims) is one
///   kernel over the permuted views;
/// - int32 (no dialect type yet) goes through the host;
/// - otherwise dst splits into dense pieces along its outer dims (a narrow of
///   columns: one kernel per row), and when those are more than
///   kMaxCopyPieces, the destination's storage span goes through the host.
/// A source sharing dst's storage is copied first (torch's copy_ does too).
void copy_cuda_into(const Tensor &dst, const Tensor &src_in) {
  for (int64_t d = 0; d < dst.dim(); ++d)
    KILN_CHECK(dst.size(d) <= 1 || dst.stride(d) > 0, "copy_: the destination (sizes ", shape_str(dst.sizes()),
               ", strides ", shape_str(dst.strides()), ") has stride ", dst.stride(d), " in dim ", d,
               ": several of its elements share one memory location (expected a destination that is not expanded)");
  Tensor src = src_in.expand(dst.sizes());
  if (src.dtype() == kInt32 || dst.dtype() == kInt32) return copy_through_host(dst, src);  // no i32 in the dialect yet
  if (src.impl()->storage == dst.impl()->storage) src = src.clone();
  const std::vector<size_t> perm = dims_by_stride(dst);
  Tensor d = permuted_view(dst, perm), s = permuted_view(src, perm);
  if (d.is_contiguous()) return copy_kernel_into_contiguous(d, s);
  // The innermost dims [inner, rank) that are dense by themselves.
  const auto rank = static_cast<size_t>(d.dim());
  size_t inner = rank;
  for (int64_t expected = 1; inner > 0; --inner) {
    const size_t k = inner - 1;
    if (d.size(static_cast<int64_t>(k)) != 1 && d.stride(static_cast<int64_t>(k)) != expected) break;
    expected *= d.size(static_cast<int64_t>(k));
  }
  int64_t pieces = 1;
  for (size_t k = 0; k < inner; ++k) pieces *= d.size(static_cast<int64_t>(k));
  if (pieces <= kMaxCopyPieces) {
    const Shape inner_sizes(d.sizes().begin() + static_cast<int64_t>(inner), d.sizes().end());
    const Shape d_strides(d.strides().begin() + static_cast<int64_t>(inner), d.strides().end());
    const Shape s_strides(s.strides().begin() + static_cast<int64_t>(inner), s.strides().end());
    std::vector<int64_t> index(inner, 0);
    for (int64_t p = 0; p < pieces; ++p) {
      int64_t doff = d.storage_offset(), soff = s.storage_offset();
      for (size_t k = 0; k < inner; ++k)
        doff += index[k] * d.stride(static_cast<int64_t>(k)), soff += index[k] * s.stride(static_cast<int64_t>(k));
      copy_kernel_into_contiguous(shape_utils::strided_view(d, inner_sizes, d_strides, doff),
                                  shape_utils::strided_view(s, inner_sizes, s_strides, soff));
      for (size_t k = inner; k-- > 0;) {
        if (++index[k] < d.size(static_cast<int64_t>(k))) break;
        index[k] = 0;
      }
    }
    return;
  }
  copy_through_host(dst, src);
}

void inplace_cuda(Inplace op, const Tensor &t_in, const Tensor *other_in, double scalar) {
  if (op == Inplace::Copy) return copy_cuda_into(t_in, *other_in);
  const char *name = op == Inplace::Fill ? "fill_" : op == Inplace::Copy ? "copy_" : op == Inplace::Add ? "add_" : "mul_";
  // An elementwise update may visit the elements in any order: a dense
  // permuted tensor (a transpose) is updated as its contiguous permutation,
  // with `other` permuted alike.
  Tensor t = t_in, other_view;
  const Tensor *other = other_in;
  if (!t.is_contiguous()) {
    const std::vector<size_t> perm = dims_by_stride(t);
    t = permuted_view(t_in, perm);
    if (other) other_view = permuted_view(*other_in, perm), other = &other_view;
  }
  KILN_CHECK(t.is_contiguous(), name, ": in-place updates of a non-dense ", t.device().str(),
             " tensor are not supported yet (sizes ", shape_str(t_in.sizes()), ", strides ", shape_str(t_in.strides()),
             "); update a contiguous tensor");
  dispatch::GraphMaker g;
  std::vector<Tensor> inputs;
  int result = -1;
  switch (op) {
  case Inplace::Fill: result = g.convert(g.constant(scalar, t.sizes(), kFloat64), t.dtype()); break;
  case Inplace::Copy: break;  // copy_cuda_into
  case Inplace::Add: {
    const int x = g.convert(g.input(t), kFloat64), y = g.convert(g.input(*other), kFloat64);
    const int sum = g.binary(ir::OpKind::Add, x, g.binary(ir::OpKind::Mul, y, g.constant(scalar, x)));
    result = g.convert(sum, t.dtype());
    inputs = {t, *other};
    break;
  }
  case Inplace::Mul: {
    const int x = g.convert(g.input(t), kFloat64);
    result = g.convert(g.binary(ir::OpKind::Mul, x, g.constant(scalar, x)), t.dtype());
    inputs = {t};
    break;
  }
  }
  g.output(result);
  g.run(name, inputs, {t});
}
const dispatch::KernelRegistrar<InplaceKernel> inplace_cuda_reg(inplace_stub, DeviceType::CUDA, inplace_cuda);

}  // namespace

Tensor &Tensor::zero_() { return fill_(0.0); }

Tensor &Tensor::fill_(double value) {
  auto graph_break = check_inplace(*this, "fill_");
  record_functional(*this, [&] { return full(sizes(), value, dtype(), device()); });
  inplace_stub("fill_", device().type, Inplace::Fill, *this, nullptr, value);
  return *this;
}

/// Copies `src` (broadcastable to this shape; any dtype, converted as
/// Tensor::to; any device, brought over first) into this tensor in place,
/// as torch's copy_. On CUDA: copy_cuda_into (any non-overlapping layout).
/// Throws kiln::Error for an undefined source, a shape that does not
/// broadcast, a tensor that requires grad under grad mode, and on CUDA a
/// destination with a stride-0 dim of size > 1.
Tensor &Tensor::copy_(const Tensor &src) {
  auto graph_break = check_inplace(*this, "copy_");
  KILN_CHECK(src.defined(), "copy_: source tensor is undefined");
  broadcast_shapes(sizes(), src.sizes(), "copy_");
  KILN_CHECK(broadcast_shapes(sizes(), src.sizes(), "copy_") == sizes(), "copy_: source shape ",
             shape_str(src.sizes()), " cannot be broadcast to destination shape ", shape_str(sizes()));
  Tensor here;  // copy_ across devices (as torch's copy_): bring src over first
  {
    NoGradGuard no_grad;
    here = src.to(device());
  }
  record_functional(*this, [&] { return here.expand(sizes()); });
  inplace_stub("copy_", device().type, Inplace::Copy, *this, &here, 0.0);
  return *this;
}

Tensor &Tensor::add_(const Tensor &other, double alpha) {
  auto graph_break = check_inplace(*this, "add_");
  KILN_CHECK(broadcast_shapes(sizes(), other.sizes(), "add_") == sizes(), "add_: shape ",
             shape_str(other.sizes()), " cannot be broadcast to ", shape_str(sizes()));
  const Device d = dispatch::common_device("add_", {this, &other});
  KILN_CHECK(d == device(), "add_: expected all tensors on the same device, got ", device().str(), " and ",
             other.device().str());
  const Tensor o = dispatch::move_scalar(other, d);
  record_functional(*this, [&] { return alpha == 1.0 ? *this + o : *this + o * alpha; });
  inplace_stub("add_", d.type, Inplace::Add, *this, &o, alpha);
  return *this;
}

Tensor &Tensor::mul_(double value) {
  auto graph_break = check_inplace(*this, "mul_");
  record_functional(*this, [&] { return *this * value; });
  inplace_stub("mul_", device().type, Inplace::Mul, *this, nullptr, value);
  return *this;
}

}  // namespace kiln
