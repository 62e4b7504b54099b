// Fused eager softmax / log_softmax (fused.h): one row kernel forward, one
// backward, as PyTorch's aten/src/ATen/native/cpu/SoftMaxKernel.cpp; and
// the switch (applies, set_enabled) every fused kernel checks.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "fused.h"
#include "fused_kernels.h"
#include "dispatch.h"
#include "shape_utils.h"
#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "../trace.h"

namespace kiln::fused {
namespace {

using autograd::TensorList;
using namespace detail;

bool enabled_from_env() {
  const char *v = std::getenv("KILN_EAGER_FUSED");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::atomic<bool> g_enabled{enabled_from_env()};

// ---- Row kernels (dim is the innermost: inner == 1) ------------------------------

/// One row: y = exp(x - max) / sum, or x - max - log(sum) (log).
template <class T> KILN_FUSED_INLINE void softmax_row(const T *__restrict x, T *__restrict y, int64_t n, bool log) {
  const T m = row_max(x, n);
  if (log) {
    const T ls = std::log(exp_shifted_sum<false>(x, m, y, n));
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - ls;
  } else {
    const T inv = T(1) / exp_shifted_sum<true>(x, m, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

/// One row's gradient: y * (g - sum(g * y)), or g - exp(y) * sum(g) (log).
template <class T>
KILN_FUSED_INLINE void softmax_backward_row(const T *__restrict g, const T *__restrict y, T *__restrict gx, int64_t n,
                                            bool log) {
  if (log) {
    const T gs = row_sum(g, n);
    for (int64_t i = 0; i < n; ++i) gx[i] = g[i] - exp_of<T>(y[i]) * gs;
  } else {
    const T d = dot(g, y, n);
    for (int64_t i = 0; i < n; ++i) gx[i] = y[i] * (g[i] - d);
  }
}

template <class T> KILN_FUSED_INLINE void rows_forward(const T *x, T *y, int64_t n, int64_t r0, int64_t r1, bool log) {
  for (int64_t r = r0; r < r1; ++r) softmax_row(x + r * n, y + r * n, n, log);
}

template <class T>
KILN_FUSED_INLINE void rows_backward(const T *g, const T *y, T *gx, int64_t n, int64_t r0, int64_t r1, bool log) {
  for (int64_t r = r0; r < r1; ++r) softmax_backward_row(g + r * n, y + r * n, gx + r * n, n, log);
}

KILN_FUSED_CLONES void rows_forward_f32(const float *x, float *y, int64_t n, int64_t r0, int64_t r1, bool log) {
  rows_forward(x, y, n, r0, r1, log);
}

KILN_FUSED_CLONES void rows_backward_f32(const float *g, const float *y, float *gx, int64_t n, int64_t r0, int64_t r1,
                                         bool log) {
  rows_backward(g, y, gx, n, r0, r1, log);
}

// ---- Column kernels (inner > 1: each of the `inner` columns is a softmax) ---------

/// One [n, inner] slab; m and s are `inner` scratch values.
template <class T> void softmax_slab(const T *x, T *y, int64_t n, int64_t inner, bool log, T *m, T *s) {
  for (int64_t j = 0; j < inner; ++j) m[j] = -std::numeric_limits<T>::infinity(), s[j] = T(0);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < inner; ++j) m[j] = kernels::max_propagate(m[j], x[k * inner + j]);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < inner; ++j) {
      y[k * inner + j] = exp_of<T>(x[k * inner + j] - m[j]);
      s[j] += y[k * inner + j];
    }
  for (int64_t j = 0; j < inner; ++j) s[j] = log ? std::log(s[j]) : T(1) / s[j];
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t i = k * inner + j;
      y[i] = log ? (x[i] - m[j]) - s[j] : y[i] * s[j];
    }
}

/// One [n, inner] slab's gradient; d is `inner` scratch values.
template <class T> void softmax_backward_slab(const T *g, const T *y, T *gx, int64_t n, int64_t inner, bool log, T *d) {
  for (int64_t j = 0; j < inner; ++j) d[j] = T(0);
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < inner; ++j) d[j] += log ? g[k * inner + j] : g[k * inner + j] * y[k * inner + j];
  for (int64_t k = 0; k < n; ++k)
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t i = k * inner + j;
      gx[i] = log ? g[i] - exp_of<T>(y[i]) * d[j] : y[i] * (g[i] - d[j]);
    }
}

// ---- The kernel tables --------------------------------------------------------------

/// y = softmax / log_softmax of the contiguous x over dim.
using SoftmaxKernel = void(const Tensor &x, const Tensor &y, int64_t dim, bool log);
/// gx from the contiguous g and y.
using SoftmaxBackwardKernel = void(const Tensor &g, const Tensor &y, const Tensor &gx, int64_t dim, bool log);
dispatch::DispatchStub<SoftmaxKernel> softmax_stub("fused softmax");
dispatch::DispatchStub<SoftmaxBackwardKernel> softmax_backward_stub("fused softmax backward");

template <class T> void softmax_typed(const T *x, T *y, const RowLayout &l, bool log) {
  if (l.inner == 1) {
    parallel_items(l.outer, l.n, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) rows_forward_f32(x, y, l.n, b, e, log);
      else rows_forward(x, y, l.n, b, e, log);
    });
    return;
  }
  const int64_t slab = l.n * l.inner;
  parallel_items(l.outer, slab, [&](int64_t b, int64_t e) {
    std::vector<T> scratch(static_cast<size_t>(2 * l.inner));
    for (int64_t o = b; o < e; ++o)
      softmax_slab(x + o * slab, y + o * slab, l.n, l.inner, log, scratch.data(), scratch.data() + l.inner);
  });
}

template <class T> void softmax_backward_typed(const T *g, const T *y, T *gx, const RowLayout &l, bool log) {
  if (l.inner == 1) {
    parallel_items(l.outer, l.n, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) rows_backward_f32(g, y, gx, l.n, b, e, log);
      else rows_backward(g, y, gx, l.n, b, e, log);
    });
    return;
  }
  const int64_t slab = l.n * l.inner;
  parallel_items(l.outer, slab, [&](int64_t b, int64_t e) {
    std::vector<T> scratch(static_cast<size_t>(l.inner));
    for (int64_t o = b; o < e; ++o)
      softmax_backward_slab(g + o * slab, y + o * slab, gx + o * slab, l.n, l.inner, log, scratch.data());
  });
}

void softmax_cpu(const Tensor &x, const Tensor &y, int64_t dim, bool log) {
  const RowLayout l = row_layout(x.sizes(), dim);
  if (x.dtype() == kFloat32) softmax_typed(x.data_ptr<float>(), y.data_ptr<float>(), l, log);
  else softmax_typed(x.data_ptr<double>(), y.data_ptr<double>(), l, log);
}

void softmax_backward_cpu(const Tensor &g, const Tensor &y, const Tensor &gx, int64_t dim, bool log) {
  const RowLayout l = row_layout(y.sizes(), dim);
  if (y.dtype() == kFloat32)
    softmax_backward_typed(g.data_ptr<float>(), y.data_ptr<float>(), gx.data_ptr<float>(), l, log);
  else softmax_backward_typed(g.data_ptr<double>(), y.data_ptr<double>(), gx.data_ptr<double>(), l, log);
}

const dispatch::KernelRegistrar<SoftmaxKernel> softmax_reg(softmax_stub, DeviceType::CPU, softmax_cpu);
const dispatch::KernelRegistrar<SoftmaxBackwardKernel> softmax_backward_reg(softmax_backward_stub, DeviceType::CPU,
                                                                            softmax_backward_cpu);

/// The backward formula from primitive ops (while a trace records it).
Tensor softmax_backward_composite(const Tensor &g, const Tensor &y, int64_t dim, bool log) {
  if (log) return g - y.exp() * g.sum({dim}, /*keepdim=*/true);
  return y * (g - (g * y).sum({dim}, /*keepdim=*/true));
}

Tensor softmax_backward(const Tensor &g, const Tensor &y, int64_t dim, bool log) {
  if (!applies(g)) return softmax_backward_composite(g, y, dim, log);
  const Tensor gc = g.contiguous();
  Tensor gx = Tensor::empty(y.sizes(), y.dtype(), y.device());
  softmax_backward_stub(log ? "log_softmax" : "softmax", y.device().type, gc, y, gx, dim, log);
  return gx;
}

}  // namespace

void set_enabled(bool on) { g_enabled = on; }
bool enabled() { return g_enabled; }

bool applies(const Tensor &x) {
  if (!g_enabled || trace::active()) return false;
  if (x.dtype() != kFloat32 && x.dtype() != kFloat64) return false;
  const DeviceType type = x.device().type;
  return type == DeviceType::CPU || softmax_stub.has(type);
}

Tensor softmax(const Tensor &x, int64_t dim, bool log) {
  const char *name = log ? "log_softmax" : "softmax";
  const int64_t d = x.dim() == 0 ? 0 : shape_utils::wrap_dim(x, dim, name);
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(xc.sizes(), xc.dtype(), xc.device());
  softmax_stub(name, xc.device().type, xc, y, d, log);
  if (autograd::any_requires_grad({xc})) {
    const char *node = log ? "LogSoftmaxBackward" : "SoftmaxBackward";
    autograd::record(y, node, {xc}, {y.detach()}, [d, log](const TensorList &g, const TensorList &s) -> TensorList {
      return {softmax_backward(g[0], s[0], d, log)};
    });
  }
  return y;
}

}  // namespace kiln::fused
