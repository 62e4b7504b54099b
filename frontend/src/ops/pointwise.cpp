// More pointwise math: abs, rsqrt, tanh, sigmoid, silu, gelu, sin, cos,
// erf, floor/ceil/round/trunc, clamp, masked_fill.
//
// Two kinds of op live here:
// - primitive kernels (abs, rsqrt, tanh, sin, cos, erf, the roundings): a
//   strided float kernel, trace::record, and a backward written with
//   public ops;
// - composites (sigmoid, silu, gelu, clamp, masked_fill) built only
//   from traceable differentiable ops (compare, where, neg, exp, add, mul,
//   div), so they need no backward of their own and kiln::compile captures them.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "dispatch.h"
#include "kernels.h"
#include "../trace.h"
#include "../amp/autocast.h"
#include "fused.h"

namespace kiln {
namespace {

using autograd::TensorList;

constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double k2OverSqrtPi = 1.12837916709551257390; // 2 / sqrt(pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588; // sqrt(2 / pi)

bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }

/// Throws unless `a` is a defined tensor of a non-bool dtype.
void check_input(const Tensor &a, const char *op) {
  KILN_CHECK(a.defined(), op, ": input is an undefined tensor");
  KILN_CHECK(a.dtype() != kBool, op, ": not supported for bool tensors; convert with .to(kiln::kFloat32) first");
}

/// The dtype a float op returns: floats keep theirs, integers give float32.
DType float_result(DType t) { return is_floating_point(t) ? t : kFloat32; }

/// The dtype a float op computes in: float64 stays, everything else float32.
DType float_compute(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

/// Converts a computed result back to the dtype the op returns.
Tensor to_result(const Tensor &out, DType result) { return out.dtype() == result ? out : out.to(result); }

/// out[i] = f(x[i]) for a strided x of a compute dtype; out contiguous, same dtype.
template <class F> void map_cpu(const Tensor &x, const Tensor &out, const char *op, F f) {
  kernels::dispatch(x.dtype(), op, [&](auto zero) {
    using T = decltype(zero);
    const T *in = reinterpret_cast<const T *>(kernels::storage_base(x));
    T *o = static_cast<T *>(out.raw_data());
    const auto it = kernels::make_iter<1>(x.sizes(), {&x.strides()}, {x.storage_offset()});
    kernels::parallel_rows(it, [&](int64_t w, std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
      const T *__restrict row = in + off[0];
      T *__restrict z = o + w;
      if (st[0] == 1)
        for (int64_t i = 0; i < n; ++i) z[i] = static_cast<T>(f(row[i]));
      else
        for (int64_t i = 0; i < n; ++i) z[i] = static_cast<T>(f(row[i * st[0]]));
    });
  });
}

/// The primitive kernels of this file.
enum class Pw { Abs, Rsqrt, Tanh, Sin, Cos, Erf, Floor, Ceil, Round, Trunc };

/// out = op(x) (same shape, x's compute dtype, out contiguous).
using PointwiseKernel = void(Pw op, const char *name, const Tensor &x, const Tensor &out);
dispatch::DispatchStub<PointwiseKernel> pointwise_stub("pointwise math");

void pointwise_cpu(Pw op, const char *name, const Tensor &x, const Tensor &out) {
  switch (op) {
  case Pw::Abs: map_cpu(x, out, name, [](auto v) { return std::abs(v); }); break;
  case Pw::Rsqrt: map_cpu(x, out, name, [](auto v) { return decltype(v)(1) / std::sqrt(v); }); break;
  case Pw::Tanh: map_cpu(x, out, name, [](auto v) { return std::tanh(v); }); break;
  case Pw::Sin: map_cpu(x, out, name, [](auto v) { return std::sin(v); }); break;
  case Pw::Cos: map_cpu(x, out, name, [](auto v) { return std::cos(v); }); break;
  case Pw::Erf: map_cpu(x, out, name, [](auto v) { return std::erf(v); }); break;
  case Pw::Floor: map_cpu(x, out, name, [](auto v) { return std::floor(v); }); break;
  case Pw::Ceil: map_cpu(x, out, name, [](auto v) { return std::ceil(v); }); break;
  // nearbyint in the default rounding mode: half to even, as torch.round.
  case Pw::Round: map_cpu(x, out, name, [](auto v) { return std::nearbyint(v); }); break;
  case Pw::Trunc: map_cpu(x, out, name, [](auto v) { return std::trunc(v); }); break;
  }
}
const dispatch::KernelRegistrar<PointwiseKernel> pointwise_cpu_reg(pointwise_stub, DeviceType::CPU, pointwise_cpu);

/// CUDA: the op's dialect form through the CUDA C emitter.
void pointwise_cuda(Pw op, const char *name, const Tensor &x, const Tensor &out) {
  static constexpr ir::OpKind kinds[] = {ir::OpKind::Abs,  ir::OpKind::Rsqrt, ir::OpKind::Tanh,  ir::OpKind::Sin,
                                         ir::OpKind::Cos,  ir::OpKind::Erf,   ir::OpKind::Floor, ir::OpKind::Ceil,
                                         ir::OpKind::Round, ir::OpKind::Trunc};
  dispatch::run_graph_kernel(name, dispatch::graph_node(kinds[static_cast<int>(op)]), {x}, {out});
}
const dispatch::KernelRegistrar<PointwiseKernel> pointwise_cuda_reg(pointwise_stub, DeviceType::CUDA, pointwise_cuda);

/// op(x) into a new contiguous tensor on x's device.
Tensor map_elements(const Tensor &x, const char *name, Pw op) {
  Tensor out = Tensor::empty(x.sizes(), x.dtype(), x.device());
  pointwise_stub(name, x.device().type, op, name, x, out);
  return out;
}

/// A primitive kernel's input (converted to the compute dtype) and output.
struct Computed {
  Tensor x, out;
};

/// Checks `a`, converts it to the float compute dtype and runs f on it.
Computed run_float_kernel(const Tensor &a, const char *op, ir::OpKind kind, Pw f) {
  check_input(a, op);
  Tensor x = a.to(float_compute(a.dtype()));
  Tensor out = map_elements(x, op, f);
  trace::record(kind, {x}, out);
  return {x, out};
}

/// floor/ceil/round/trunc: integers are returned as a copy (as PyTorch);
/// floats through the kernel `f` in the float compute dtype, with a zero
/// gradient (PyTorch's derivatives.yaml: zeros_like(grad)).
Tensor rounding(const Tensor &a, const char *op, ir::OpKind kind, Pw f) {
  check_input(a, op);
  if (!a.is_floating_point()) return a.clone();
  Tensor x = a.to(float_compute(a.dtype()));
  Tensor out = map_elements(x, op, f);
  trace::record(kind, {x}, out);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "RoundingBackward", {x}, {}, [](const TensorList &g, const TensorList &) -> TensorList {
      return {zeros_like(g[0])};
    });
  return to_result(out, a.dtype());
}

/// x with `bound` (a constant of x's dtype) where `cond` is true.
Tensor replace_where(const Tensor &x, const Tensor &cond, double bound) {
  return where(cond, full({}, bound, x.dtype()), x);
}

}  // namespace

Tensor abs(const Tensor &a) {
  check_input(a, "abs");
  // Integers stay integers (as torch.abs); 16-bit floats compute in float32.
  Tensor x = a.to(is_half(a.dtype()) ? kFloat32 : a.dtype());
  Tensor out = map_elements(x, "abs", Pw::Abs);
  trace::record(ir::OpKind::Abs, {x}, out);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "AbsBackward", {x}, {x}, [](const TensorList &g, const TensorList &s) -> TensorList {
      // g * sign(x); sign(0) = 0 as in PyTorch.
      Tensor zero = zeros({}, s[0].dtype());
      Tensor gzero = zeros({}, g[0].dtype());
      return {where(gt(s[0], zero), g[0], where(lt(s[0], zero), -g[0], gzero))};
    });
  return to_result(out, a.dtype());
}

Tensor rsqrt(const Tensor &a) {
  amp::detail::AutocastOp ac("rsqrt");
  if (ac) return rsqrt(ac.cast(a));
  auto [x, out] = run_float_kernel(a, "rsqrt", ir::OpKind::Rsqrt, Pw::Rsqrt);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "RsqrtBackward", {x}, {out.detach()},
                     [](const TensorList &g, const TensorList &s) -> TensorList {
                       return {g[0] * s[0] * s[0] * s[0] * -0.5};  // d/dx x^(-1/2) = -x^(-3/2) / 2
                     });
  return to_result(out, float_result(a.dtype()));
}

Tensor tanh(const Tensor &a) {
  auto [x, out] = run_float_kernel(a, "tanh", ir::OpKind::Tanh, Pw::Tanh);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "TanhBackward", {x}, {out.detach()},
                     [](const TensorList &g, const TensorList &s) -> TensorList {
                       return {g[0] - g[0] * s[0] * s[0]};  // 1 - tanh^2
                     });
  return to_result(out, float_result(a.dtype()));
}

Tensor erf(const Tensor &a) {
  auto [x, out] = run_float_kernel(a, "erf", ir::OpKind::Erf, Pw::Erf);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "ErfBackward", {x}, {x}, [](const TensorList &g, const TensorList &s) -> TensorList {
      return {g[0] * exp(-(s[0] * s[0])) * k2OverSqrtPi};  // 2/sqrt(pi) exp(-x^2)
    });
  return to_result(out, float_result(a.dtype()));
}

Tensor floor(const Tensor &a) { return rounding(a, "floor", ir::OpKind::Floor, Pw::Floor); }
Tensor ceil(const Tensor &a) { return rounding(a, "ceil", ir::OpKind::Ceil, Pw::Ceil); }
Tensor round(const Tensor &a) { return rounding(a, "round", ir::OpKind::Round, Pw::Round); }
Tensor trunc(const Tensor &a) { return rounding(a, "trunc", ir::OpKind::Trunc, Pw::Trunc); }

Tensor sin(const Tensor &a) {
  auto [x, out] = run_float_kernel(a, "sin", ir::OpKind::Sin, Pw::Sin);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "SinBackward", {x}, {x}, [](const TensorList &g, const TensorList &s) -> TensorList {
      return {g[0] * cos(s[0])};
    });
  return to_result(out, float_result(a.dtype()));
}

Tensor cos(const Tensor &a) {
  auto [x, out] = run_float_kernel(a, "cos", ir::OpKind::Cos, Pw::Cos);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "CosBackward", {x}, {x}, [](const TensorList &g, const TensorList &s) -> TensorList {
      return {-(g[0] * sin(s[0]))};
    });
  return to_result(out, float_result(a.dtype()));
}

Tensor sigmoid(const Tensor &a) {
  amp::detail::ExcludeGuard no_autocast;  // not an autocast op: its exp must not cast (PyTorch: one kernel)
  check_input(a, "sigmoid");
  Tensor x = a.to(float_compute(a.dtype()));
  // With e = exp(-|x|) <= 1 (never overflows): sigmoid = 1 / (1 + e) for
  // x >= 0 and e / (1 + e) for x < 0. Both branches stay finite, so their
  // gradients do too (a plain 1 / (1 + exp(-x)) gives 0 * inf = nan in
  // backward for x < -88 in float32).
  Tensor nonneg = ge(x, zeros({}, x.dtype()));
  Tensor e = exp(where(nonneg, -x, x));
  Tensor out = where(nonneg, ones({}, x.dtype()), e) / (e + 1.0);
  return to_result(out, float_result(a.dtype()));
}

Tensor silu(const Tensor &a) {
  amp::detail::ExcludeGuard no_autocast;  // not an autocast op: its exp must not cast (PyTorch: one kernel)
  check_input(a, "silu");
  Tensor x = a.to(float_compute(a.dtype()));
  return to_result(x * sigmoid(x), float_result(a.dtype()));
}

Tensor gelu(const Tensor &a, const std::string &approximate) {
  amp::detail::ExcludeGuard no_autocast;  // not an autocast op: its exp must not cast (PyTorch: one kernel)
  KILN_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be \"none\" or \"tanh\", got \"",
             approximate, "\"");
  check_input(a, "gelu");
  if (approximate == "tanh" && fused::applies(a)) return fused::gelu_tanh(a);  // untraced eager: one kernel
  Tensor x = a.to(float_compute(a.dtype()));
  Tensor out;
  if (approximate == "tanh") {
    // 0.5 (1 + tanh(u)) == sigmoid(2u): the same function from traceable ops.
    Tensor u = (x + x * x * x * 0.044715) * kSqrt2OverPi;
    out = x * sigmoid(u * 2.0);
  } else {
    // x * Phi(x) = x * (1 + erf(x / sqrt 2)) / 2, as PyTorch's GeluKernel.
    out = x * ((erf(x * kSqrt1_2) + 1.0) * 0.5);
  }
  return to_result(out, float_result(a.dtype()));
}

Tensor clamp(const Tensor &a, double min, double max) {
  check_input(a, "clamp");
  KILN_CHECK(!std::isnan(min) && !std::isnan(max), "clamp: bounds must not be NaN, got min=", min, " max=", max,
             " (use -inf/+inf for no bound)");
  // Integer tensors stay integer when the finite bounds are integral (as
  // torch's type promotion with Python scalars); otherwise float32.
  auto integral = [](double v) { return std::isinf(v) || std::nearbyint(v) == v; };
  DType result = a.dtype();
  if (!a.is_floating_point() && !(integral(min) && integral(max))) result = kFloat32;
  Tensor x = a.to(is_half(result) ? kFloat32 : result);
  // max(min(x, ...)) order as torch.clamp: min > max gives max everywhere.
  // The gradient is 1 where x is kept. NaN passes through with gradient 0
  // (torch's clamp_backward masks with comparisons that are false for NaN):
  // it is replaced by a NaN constant, so no gradient flows to it.
  Tensor out = x;
  const bool bounded = min != -INFINITY || max != INFINITY;
  if (bounded && x.is_floating_point()) out = replace_where(out, ne(out, out), NAN);
  if (min != -INFINITY) out = replace_where(out, lt(out, full({}, min, x.dtype())), min);
  if (max != INFINITY) out = replace_where(out, gt(out, full({}, max, x.dtype())), max);
  if (out.impl() == x.impl()) out = x.clone();  // never alias the input
  return to_result(out, result);
}

Tensor clamp(const Tensor &a, std::optional<double> min, std::optional<double> max) {
  KILN_CHECK(min.has_value() || max.has_value(), "clamp: at least one of min and max must be given, got neither");
  return clamp(a, min.value_or(-INFINITY), max.value_or(INFINITY));
}

Tensor clamp_min(const Tensor &a, double min) { return clamp(a, min, INFINITY); }
Tensor clamp_max(const Tensor &a, double max) { return clamp(a, -INFINITY, max); }

Tensor masked_fill(const Tensor &a, const Tensor &mask, double value) {
  KILN_CHECK(a.defined(), "masked_fill: input is an undefined tensor");
  KILN_CHECK(mask.defined(), "masked_fill: mask is an undefined tensor");
  KILN_CHECK(mask.dtype() == kBool, "masked_fill: mask must be a bool tensor, got ", dtype_name(mask.dtype()));
  const Shape s = broadcast_shapes(mask.sizes(), a.sizes(), "masked_fill");
  KILN_CHECK(s == a.sizes(), "masked_fill: mask of shape ", shape_str(mask.sizes()),
             " cannot be broadcast to the input shape ", shape_str(a.sizes()));
  // `value` is converted to a's dtype (as torch.masked_fill).
  return where(mask, full({}, value, a.dtype()), a);
}

}  // namespace kiln
