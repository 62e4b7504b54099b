// Fused eager gelu "tanh" (fused.h): one elementwise kernel forward and one
// backward (PyTorch: GeluKernelImpl / GeluBackwardKernelImpl in
// aten/src/ATen/native/cpu/Activation.cpp), computing the composite's
// x * sigmoid(2u) in the same order of operations.
#include "fused.h"
#include "fused_kernels.h"
#include "dispatch.h"
#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::fused {
namespace {

using autograd::TensorList;
using namespace detail;

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;

/// z = 2u = 2 sqrt(2/pi) (x + 0.044715 x^3), in the composite's order.
template <class T> KILN_FUSED_INLINE T twice_u(T x) {
  return (x + x * x * x * static_cast<T>(kCubic)) * static_cast<T>(kSqrt2OverPi) * T(2);
}

/// sigmoid(z) from e = exp(-|z|) <= 1, as kiln::sigmoid.
template <class T> KILN_FUSED_INLINE T sigmoid_of(T z, T e) { return (z >= T(0) ? T(1) : e) / (e + T(1)); }

template <class T> KILN_FUSED_INLINE void gelu_range(const T *__restrict x, T *__restrict y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) {
    const T z = twice_u(x[i]);
    const T ex = exp_of<T>(z >= T(0) ? -z : z);
    y[i] = x[i] * sigmoid_of(z, ex);
  }
}

/// d/dx x s(z) = s + x s (1 - s) z'(x), s (1 - s) = e / (1 + e)^2.
template <class T>
KILN_FUSED_INLINE void gelu_backward_range(const T *__restrict g, const T *__restrict x, T *__restrict gx, int64_t b,
                                           int64_t e) {
  const T dz0 = static_cast<T>(2 * kSqrt2OverPi), dz2 = static_cast<T>(6 * kSqrt2OverPi * kCubic);
  for (int64_t i = b; i < e; ++i) {
    const T v = x[i];
    const T z = twice_u(v);
    const T ex = exp_of<T>(z >= T(0) ? -z : z);
    const T s = sigmoid_of(z, ex);
    const T ds = ex / ((ex + T(1)) * (ex + T(1)));
    gx[i] = g[i] * (s + v * ds * (dz0 + dz2 * v * v));
  }
}

KILN_FUSED_CLONES void gelu_range_f32(const float *x, float *y, int64_t b, int64_t e) { gelu_range(x, y, b, e); }
KILN_FUSED_CLONES void gelu_backward_range_f32(const float *g, const float *x, float *gx, int64_t b, int64_t e) {
  gelu_backward_range(g, x, gx, b, e);
}

/// y = gelu_tanh(x); x, y contiguous.
using GeluKernel = void(const Tensor &x, const Tensor &y);
/// gx = g * gelu_tanh'(x); all contiguous.
using GeluBackwardKernel = void(const Tensor &g, const Tensor &x, const Tensor &gx);
dispatch::DispatchStub<GeluKernel> gelu_stub("fused gelu");
dispatch::DispatchStub<GeluBackwardKernel> gelu_backward_stub("fused gelu backward");

template <class T> void gelu_typed(const T *x, T *y, int64_t n) {
  kernels::parallel_for(n, kernels::kMapChunk, n, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) gelu_range_f32(x, y, b, e);
    else gelu_range(x, y, b, e);
  });
}

template <class T> void gelu_backward_typed(const T *g, const T *x, T *gx, int64_t n) {
  kernels::parallel_for(n, kernels::kMapChunk, n, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, float>) gelu_backward_range_f32(g, x, gx, b, e);
    else gelu_backward_range(g, x, gx, b, e);
  });
}

void gelu_cpu(const Tensor &x, const Tensor &y) {
  if (x.dtype() == kFloat32) gelu_typed(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  else gelu_typed(x.data_ptr<double>(), y.data_ptr<double>(), x.numel());
}

void gelu_backward_cpu(const Tensor &g, const Tensor &x, const Tensor &gx) {
  if (x.dtype() == kFloat32)
    gelu_backward_typed(g.data_ptr<float>(), x.data_ptr<float>(), gx.data_ptr<float>(), x.numel());
  else gelu_backward_typed(g.data_ptr<double>(), x.data_ptr<double>(), gx.data_ptr<double>(), x.numel());
}

const dispatch::KernelRegistrar<GeluKernel> gelu_reg(gelu_stub, DeviceType::CPU, gelu_cpu);
const dispatch::KernelRegistrar<GeluBackwardKernel> gelu_backward_reg(gelu_backward_stub, DeviceType::CPU,
                                                                      gelu_backward_cpu);

/// The backward from primitive ops (while a trace records it).
Tensor gelu_backward_composite(const Tensor &g, const Tensor &x) {
  const Tensor s = sigmoid((x + x * x * x * kCubic) * kSqrt2OverPi * 2.0);
  const Tensor dz = (x * x * (6 * kSqrt2OverPi * kCubic)) + 2 * kSqrt2OverPi;
  return g * (s + x * (s * (-s + 1.0)) * dz);
}

Tensor gelu_backward(const Tensor &g, const Tensor &x) {
  if (!applies(g)) return gelu_backward_composite(g, x);
  const Tensor gc = g.contiguous();
  Tensor gx = Tensor::empty(x.sizes(), x.dtype(), x.device());
  gelu_backward_stub("gelu", x.device().type, gc, x, gx);
  return gx;
}

}  // namespace

Tensor gelu_tanh(const Tensor &x) {
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(xc.sizes(), xc.dtype(), xc.device());
  gelu_stub("gelu", xc.device().type, xc, y);
  if (autograd::any_requires_grad({xc}))
    autograd::record(y, "GeluBackward", {xc}, {xc}, [](const TensorList &g, const TensorList &s) -> TensorList {
      return {gelu_backward(g[0], s[0])};
    });
  return y;
}

}  // namespace kiln::fused
