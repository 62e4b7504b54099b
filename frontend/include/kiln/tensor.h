// kiln/tensor.h - kiln::Tensor: a refcounted, strided view of a Storage.
//
// Layout semantics follow PyTorch: a tensor is (storage, sizes, strides in
// elements, storage offset, dtype, device). Views (view, reshape when
// possible, transpose, permute, expand, narrow, unsqueeze) share storage.
// Element access in kernels is data[offset + sum_i index_i * stride_i].
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/runtime/Allocator.h"
#include "kiln/runtime/DType.h"
#include "kiln/runtime/Device.h"

namespace kiln {

using Shape = std::vector<int64_t>;
using Storage = std::shared_ptr<runtime::Buffer>;

class Tensor;
namespace autograd {
struct Node;
}

/// Autograd state of one tensor (PyTorch's AutogradMeta).
struct AutogradMeta {
  bool requires_grad = false;              ///< leaf flag set by the user
  std::shared_ptr<Tensor> grad;            ///< accumulated gradient (leaves)
  std::shared_ptr<autograd::Node> grad_fn; ///< producer node (non-leaves)
  int output_nr = 0;                       ///< which output of grad_fn
  std::weak_ptr<autograd::Node> grad_accumulator;  ///< AccumulateGrad (leaves)
};

/// The data behind a Tensor. Users normally touch Tensor only.
struct TensorImpl {
  Storage storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  ///< in elements
  DType dtype = kFloat32;
  Device device = kCPU;
  AutogradMeta autograd;
};

/// Contiguous (row-major) strides for `sizes`: [2, 3, 4] -> [12, 4, 1].
Shape contiguous_strides(const Shape &sizes);
/// Product of sizes (1 for a 0-d tensor).
int64_t numel_of(const Shape &sizes);

class Tensor {
public:
  Tensor() = default;  ///< an undefined tensor (defined() == false)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// Allocates an uninitialized contiguous tensor.
  static Tensor empty(const Shape &sizes, DType dtype = kFloat32, Device device = kCPU);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl *impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl> &impl_ptr() const { return impl_; }

  // ---- metadata ---------------------------------------------------------
  const Shape &sizes() const { return checked().sizes; }
  const Shape &shape() const { return sizes(); }
  const Shape &strides() const { return checked().strides; }
  /// Size of dimension `d`; negative d counts from the end. Throws on a bad dim.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t dim() const { return static_cast<int64_t>(sizes().size()); }
  int64_t numel() const { return numel_of(sizes()); }
  int64_t storage_offset() const { return checked().offset; }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().device; }
  bool is_contiguous() const;
  bool is_floating_point() const { return kiln::is_floating_point(dtype()); }

  /// Pointer to element [0, ..., 0], in the memory of device(): host code may
  /// read it only on a host-accessible device (kernels do; others call .cpu()
  /// first). Throws if T does not match dtype().
  template <class T> T *data_ptr() const;
  void *raw_data() const;

  /// The single value of a one-element tensor as a double (any dtype); on a
  /// device the host cannot read, the element is copied to the host first.
  double item() const;
  /// All elements in row-major order converted to T (float, double, int64_t)
  /// (through a host copy on a device the host cannot read).
  template <class T> std::vector<T> to_vector() const;

  // ---- autograd ---------------------------------------------------------
  bool requires_grad() const;
  /// Marks a leaf as requiring grad. Throws on non-leaves and integer dtypes.
  Tensor &requires_grad_(bool requires_grad = true);
  /// The accumulated gradient of a leaf (undefined if none yet).
  Tensor grad() const;
  void set_grad(const Tensor &g) const;
  std::shared_ptr<autograd::Node> grad_fn() const { return checked().autograd.grad_fn; }
  bool is_leaf() const { return grad_fn() == nullptr; }
  /// Computes d(this)/d(leaves) and accumulates into their .grad().
  /// `gradient` defaults to ones for a one-element tensor; required otherwise.
  /// The graph's saved tensors are freed unless retain_graph (a second
  /// backward through it then throws kiln::Error).
  void backward(const Tensor &gradient = Tensor(), bool retain_graph = false) const;
  /// Registers hook(grad) -> new grad (or undefined to keep it), called when
  /// this tensor's gradient is computed (torch.Tensor.register_hook).
  /// Throws if the tensor does not require grad.
  void register_hook(std::function<Tensor(const Tensor &)> hook) const;
  /// Leaves only: hook(param) called after .grad() was accumulated
  /// (torch.Tensor.register_post_accumulate_grad_hook; DDP uses it).
  void register_post_accumulate_grad_hook(std::function<void(const Tensor &)> hook) const;
  /// Write version of the storage (bumped by in-place ops), as torch's _version.
  uint64_t _version() const;
  /// Marks an in-place write (for kernels that write through data_ptr).
  void bump_version() const;
  /// A tensor sharing storage with no autograd history.
  Tensor detach() const;

  // ---- views and layout (see frontend/src/ops/views.cpp) ------------------
  /// PyTorch `view`: no copy; throws kiln::Error when the strides do not allow
  /// it (suggesting reshape). One size may be -1.
  Tensor view(const Shape &shape) const;
  /// `view` when possible, otherwise a contiguous copy.
  Tensor reshape(const Shape &shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  ///< 2-D transpose
  Tensor permute(const Shape &dims) const;
  /// Broadcasts size-1 dims (stride 0); new leading dims allowed; -1 keeps a size.
  Tensor expand(const Shape &shape) const;
  /// Elements [start, start+length) of `dim` (a view).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// Python-style slice [start:end) of `dim` (negative indices allowed, clamped).
  Tensor slice(int64_t dim, int64_t start, int64_t end) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  /// Converts the element type (a copy unless dtype already matches).
  Tensor to(DType dtype) const;
  /// A copy on `device` (this tensor itself when already there), through the
  /// runtime DeviceBackend::copy. Autograd: the gradient is copied back to
  /// this tensor's device (PyTorch's ToCopyBackward). Throws kiln::Error when
  /// `device` has no backend. Not captured by kiln::compile (a graph break).
  Tensor to(Device device) const;
  /// to(dtype) then to(device).
  Tensor to(Device device, DType dtype) const;
  /// to(kCPU).
  Tensor cpu() const;
  /// Makes this tensor (and every handle sharing its TensorImpl) refer to
  /// `other`'s data, dtype and layout, keeping its autograd identity (as
  /// PyTorch's `param.data = other`). Used by Module::to and checkpoint loading.
  void set_data(const Tensor &other) const;

  // ---- math (see ops.h for the free-function forms and docs) ---------------
  Tensor add(const Tensor &o) const;
  Tensor sub(const Tensor &o) const;
  Tensor mul(const Tensor &o) const;
  Tensor div(const Tensor &o) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor relu() const;
  Tensor matmul(const Tensor &o) const;
  Tensor sum() const;
  Tensor sum(const Shape &dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape &dims, bool keepdim = false) const;
  Tensor amax(const Shape &dims = {}, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor pow(double exponent) const;
  Tensor sqrt() const;

  // ---- in-place (optimizers, init; refuse tensors that need grad) ---------
  Tensor &zero_();
  Tensor &fill_(double value);
  Tensor &copy_(const Tensor &src);
  Tensor &add_(const Tensor &other, double alpha = 1.0);
  Tensor &mul_(double value);

  std::string str() const;

private:
  const TensorImpl &checked() const;
  /// to_vector's read of host-readable memory.
  template <class T> std::vector<T> host_values() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream &operator<<(std::ostream &os, const Tensor &t);

Tensor operator+(const Tensor &a, const Tensor &b);
Tensor operator-(const Tensor &a, const Tensor &b);
Tensor operator*(const Tensor &a, const Tensor &b);
Tensor operator/(const Tensor &a, const Tensor &b);
Tensor operator+(const Tensor &a, double b);
Tensor operator-(const Tensor &a, double b);
Tensor operator*(const Tensor &a, double b);
Tensor operator/(const Tensor &a, double b);
Tensor operator*(double a, const Tensor &b);
Tensor operator-(const Tensor &a);

}  // namespace kiln
