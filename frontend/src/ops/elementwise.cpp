// Elementwise ops: arithmetic, unary math, comparisons, where.
// Each op: check -> promote -> broadcast (expand, a traced view) -> kernel on
// same-shape operands -> trace record -> autograd record.
#include <cmath>
#include <type_traits>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "dispatch.h"
#include "kernels.h"
#include "../trace.h"
#include "../amp/autocast.h"

namespace kiln {
namespace {

using autograd::TensorList;

void check_defined(const Tensor &t, const char *op, const char *what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }

/// The dtype kernels compute in: float16/bfloat16 are widened to float32.
DType compute_type(DType t) { return is_half(t) ? kFloat32 : t; }

/// Arithmetic promotion (promote_types) with bool arithmetic rejected when
/// both operands are bool.
DType promote_arith(DType a, DType b, const char *op) {
  KILN_CHECK(a != kBool || b != kBool, op, ": arithmetic on two bool tensors is not supported; convert with "
             ".to(kiln::kFloat32) or .to(kiln::kInt64) first");
  return promote_types(a, b);
}

// Contiguous inner loops (restrict, no branches per element: GCC
// vectorizes them) for the common row layouts: both operands dense, or one a
// broadcast scalar (stride 0).
template <class TO, class TA, class TB, class F>
void loop2_dense(TO *__restrict z, const TA *__restrict x, const TB *__restrict y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
}
template <class TO, class TA, class TB, class F>
void loop2_scalar_b(TO *__restrict z, const TA *__restrict x, const TB y0, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y0);
}
template <class TO, class TA, class TB, class F>
void loop2_scalar_a(TO *__restrict z, const TA x0, const TB *__restrict y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) z[i] = f(x0, y[i]);
}
template <class TO, class TA, class F> void loop1_dense(TO *__restrict z, const TA *__restrict x, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) z[i] = f(x[i]);
}

/// out[i] = f(a[i], b[i]) over same-shape strided operands; out contiguous.
/// Large tensors are split over threads (kernels::parallel_rows).
template <class TO, class TA, class TB, class F>
void map2(const Tensor &a, const Tensor &b, const Tensor &out, F f) {
  TO *o = static_cast<TO *>(out.raw_data());
  const TA *pa = reinterpret_cast<const TA *>(kernels::storage_base(a));
  const TB *pb = reinterpret_cast<const TB *>(kernels::storage_base(b));
  const auto it = kernels::make_iter<2>(a.sizes(), {&a.strides(), &b.strides()}, {a.storage_offset(), b.storage_offset()});
  kernels::parallel_rows(it, [&](int64_t w, std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
    const TA *x = pa + off[0];
    const TB *y = pb + off[1];
    TO *z = o + w;
    if (st[0] == 1 && st[1] == 1) loop2_dense(z, x, y, n, f);
    else if (st[0] == 1 && st[1] == 0) loop2_scalar_b(z, x, y[0], n, f);
    else if (st[0] == 0 && st[1] == 1) loop2_scalar_a(z, x[0], y, n, f);
    else
      for (int64_t i = 0; i < n; ++i) z[i] = f(x[i * st[0]], y[i * st[1]]);
  });
}

/// out[i] = f(a[i]); `dense(x, z, n)` computes a contiguous row.
template <class TO, class TA, class F, class Dense>
void map1(const Tensor &a, const Tensor &out, F f, Dense dense) {
  TO *o = static_cast<TO *>(out.raw_data());
  const TA *pa = reinterpret_cast<const TA *>(kernels::storage_base(a));
  const auto it = kernels::make_iter<1>(a.sizes(), {&a.strides()}, {a.storage_offset()});
  kernels::parallel_rows(it, [&](int64_t w, std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
    const TA *x = pa + off[0];
    TO *z = o + w;
    if (st[0] == 1) dense(x, z, n);
    else
      for (int64_t i = 0; i < n; ++i) z[i] = f(x[i * st[0]]);
  });
}

template <class TO, class TA, class F> void map1(const Tensor &a, const Tensor &out, F f) {
  map1<TO, TA>(a, out, f, [f](const TA *x, TO *z, int64_t n) { loop1_dense(z, x, n, f); });
}

/// Promotes and broadcasts two operands to one compute type, shape and
/// device (a 0-d cpu scalar moves to `device`).
std::pair<Tensor, Tensor> prepare(const Tensor &a, const Tensor &b, DType compute, const Device &device,
                                  const char *op) {
  Shape s = broadcast_shapes(a.sizes(), b.sizes(), op);
  return {dispatch::move_scalar(a.to(compute), device).expand(s), dispatch::move_scalar(b.to(compute), device).expand(s)};
}

/// torch.maximum of two elements: NaN if either is NaN, else the larger,
/// the first on a tie (so maximum(-0.0, 0.0) is -0.0, as torch's CPU kernel).
template <class T> T maximum_value(T p, T q) {
  if constexpr (std::is_floating_point_v<T>) {
    if (p != p) return p;
    if (q != q) return q;
  }
  return p < q ? q : p;
}

/// torch.minimum of two elements; as maximum_value.
template <class T> T minimum_value(T p, T q) {
  if constexpr (std::is_floating_point_v<T>) {
    if (p != p) return p;
    if (q != q) return q;
  }
  return q < p ? q : p;
}

/// a / b rounded toward -inf, as PyTorch's div_floor_floating /
/// div_floor_integer (aten/src/ATen/native/BinaryOps.h): floats go through
/// fmod so the quotient of exact multiples is exact; x / 0 is IEEE.
/// Integers: b != 0 (checked before the kernel runs).
template <class T> T floor_div_value(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == 0) return a / b;
    const T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && (b < 0) != (mod < 0)) div -= T(1);
    if (div == 0) return std::copysign(T(0), a / b);
    T floordiv = std::floor(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
    return floordiv;
  } else {
    const T quot = a / b, rem = a % b;
    return (rem != 0 && (a < 0) != (b < 0)) ? quot - 1 : quot;
  }
}

/// torch.remainder: the result has the sign of b (aten's remainder_kernel:
/// fmod, then + b where the signs differ).
template <class T> T remainder_value(T a, T b) {
  T mod;
  if constexpr (std::is_floating_point_v<T>) mod = std::fmod(a, b);
  else mod = a % b;
  if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
  return mod;
}

/// torch.fmod: C fmod / %, the sign of a.
template <class T> T fmod_value(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b);
  else return a % b;
}

/// TruncDiv is integer division (C's /); float trunc division is
/// trunc(a / b) from traced ops (div with rounding_mode).
enum class Bin { Add, Sub, Mul, Div, Max, Min, FloorDiv, TruncDiv, Rem, Fmod };

bool is_integer_division(Bin op) { return op == Bin::FloorDiv || op == Bin::TruncDiv || op == Bin::Rem || op == Bin::Fmod; }

/// True if any element of the strided tensor y is zero.
template <class T> bool has_zero(const Tensor &y) {
  const T *p = reinterpret_cast<const T *>(kernels::storage_base(y));
  bool zero = false;
  kernels::for_each_row<1>(y.sizes(), {&y.strides()}, {y.storage_offset()},
                           [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
                             for (int64_t i = 0; i < n; ++i) zero |= p[off[0] + i * st[0]] == T(0);
                           });
  return zero;
}

/// out = x (op) y over same-shape operands of out's compute dtype.
using BinaryKernel = void(Bin op, const char *name, const Tensor &x, const Tensor &y, const Tensor &out);
dispatch::DispatchStub<BinaryKernel> binary_stub("elementwise binary");

/// The integer division family: throws (before computing) on a zero divisor.
template <class T> void division_cpu(Bin op, const char *name, const Tensor &x, const Tensor &y, const Tensor &out) {
  if constexpr (!std::is_floating_point_v<T>)
    KILN_CHECK(!has_zero<T>(y), name, ": ZeroDivisionError: integer division by zero (an element of the divisor is 0, "
               "dtype ", dtype_name(y.dtype()), ")");
  switch (op) {
  case Bin::FloorDiv: map2<T, T, T>(x, y, out, [](T p, T q) { return floor_div_value(p, q); }); break;
  case Bin::TruncDiv: map2<T, T, T>(x, y, out, [](T p, T q) { return static_cast<T>(p / q); }); break;
  case Bin::Rem: map2<T, T, T>(x, y, out, [](T p, T q) { return remainder_value(p, q); }); break;
  default: map2<T, T, T>(x, y, out, [](T p, T q) { return fmod_value(p, q); }); break;
  }
}

void binary_cpu(Bin op, const char *name, const Tensor &x, const Tensor &y, const Tensor &out) {
  kernels::dispatch(out.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
    case Bin::Add: map2<T, T, T>(x, y, out, [](T p, T q) { return static_cast<T>(p + q); }); break;
    case Bin::Sub: map2<T, T, T>(x, y, out, [](T p, T q) { return static_cast<T>(p - q); }); break;
    case Bin::Mul: map2<T, T, T>(x, y, out, [](T p, T q) { return static_cast<T>(p * q); }); break;
    case Bin::Div: map2<T, T, T>(x, y, out, [](T p, T q) { return static_cast<T>(p / q); }); break;
    case Bin::Max: map2<T, T, T>(x, y, out, [](T p, T q) { return maximum_value(p, q); }); break;
    case Bin::Min: map2<T, T, T>(x, y, out, [](T p, T q) { return minimum_value(p, q); }); break;
    case Bin::FloorDiv:
    case Bin::TruncDiv:
    case Bin::Rem:
    case Bin::Fmod: division_cpu<T>(op, name, x, y, out); break;
    }
  });
}
const dispatch::KernelRegistrar<BinaryKernel> binary_cpu_reg(binary_stub, DeviceType::CPU, binary_cpu);

/// The traced node of a binary op (integer TruncDiv is kiln.div on integers).
ir::OpKind binary_kind(Bin op) {
  switch (op) {
  case Bin::Add: return ir::OpKind::Add;
  case Bin::Sub: return ir::OpKind::Sub;
  case Bin::Mul: return ir::OpKind::Mul;
  case Bin::Div: return ir::OpKind::Div;
  case Bin::Max: return ir::OpKind::Maximum;
  case Bin::Min: return ir::OpKind::Minimum;
  case Bin::FloorDiv: return ir::OpKind::FloorDiv;
  case Bin::TruncDiv: return ir::OpKind::Div;
  case Bin::Rem: return ir::OpKind::Remainder;
  case Bin::Fmod: return ir::OpKind::Fmod;
  }
  return ir::OpKind::Add;
}

/// The gradient of maximum (kMax) or minimum as PyTorch's derivatives.yaml:
/// g where the operand wins, g / 2 on ties, 0 where it loses; where either
/// operand is NaN (no order) both get all of g.
TensorList extreme_backward(const TensorList &g, const TensorList &s, bool is_max) {
  Tensor zero = zeros({}, g[0].dtype());
  Tensor shared = where(eq(s[0], s[1]), g[0] * 0.5, g[0]);
  Tensor a_loses = is_max ? lt(s[0], s[1]) : gt(s[0], s[1]);
  Tensor b_loses = is_max ? gt(s[0], s[1]) : lt(s[0], s[1]);
  return {where(a_loses, zero, shared), where(b_loses, zero, shared)};
}

void record_binary_grad(Bin op, const Tensor &x, const Tensor &y, const Tensor &out) {
  auto zero_grads = [](const TensorList &g, const TensorList &) -> TensorList {
    return {zeros_like(g[0]), zeros_like(g[0])};
  };
  switch (op) {
  case Bin::Add:
    autograd::record(out, "AddBackward", {x, y}, {},
                     [](const TensorList &g, const TensorList &) -> TensorList { return {g[0], g[0]}; });
    break;
  case Bin::Sub:
    autograd::record(out, "SubBackward", {x, y}, {},
                     [](const TensorList &g, const TensorList &) -> TensorList { return {g[0], -g[0]}; });
    break;
  case Bin::Mul:
    autograd::record(out, "MulBackward", {x, y}, {x, y}, [](const TensorList &g, const TensorList &s) -> TensorList {
      return {g[0] * s[1], g[0] * s[0]};
    });
    break;
  case Bin::Div:
    autograd::record(out, "DivBackward", {x, y}, {x, y}, [](const TensorList &g, const TensorList &s) -> TensorList {
      return {g[0] / s[1], -(g[0] * s[0]) / (s[1] * s[1])};
    });
    break;
  case Bin::Max:
  case Bin::Min: {
    const bool is_max = op == Bin::Max;
    autograd::record(out, is_max ? "MaximumBackward" : "MinimumBackward", {x, y}, {x, y},
                     [is_max](const TensorList &g, const TensorList &s) { return extreme_backward(g, s, is_max); });
    break;
  }
  case Bin::FloorDiv:
  case Bin::TruncDiv: autograd::record(out, "DivBackward", {x, y}, {}, zero_grads); break;
  case Bin::Rem:
    autograd::record(out, "RemainderBackward", {x, y}, {x, y}, [](const TensorList &g, const TensorList &s) -> TensorList {
      return {g[0], -(g[0] * floor_divide(s[0], s[1]))};
    });
    break;
  case Bin::Fmod:
    autograd::record(out, "FmodBackward", {x, y}, {x, y}, [](const TensorList &g, const TensorList &s) -> TensorList {
      return {g[0], -(g[0] * div(s[0], s[1], "trunc"))};
    });
    break;
  }
}

Tensor binary(const Tensor &a, const Tensor &b, Bin op, const char *name) {
  check_defined(a, name, "first operand");
  check_defined(b, name, "second operand");
  const Device device = dispatch::common_device(name, {&a, &b});
  DType result = promote_arith(a.dtype(), b.dtype(), name);
  if (op == Bin::Div && !is_floating_point(result)) result = kFloat32;  // true division
  const DType compute = compute_type(result);
  auto [x, y] = prepare(a, b, compute, device, name);
  Tensor out = Tensor::empty(x.sizes(), compute, device);
  binary_stub(name, device.type, op, name, x, y, out);
  trace::record(binary_kind(op), {x, y}, out);
  if (autograd::any_requires_grad({x, y})) record_binary_grad(op, x, y, out);
  return result != compute ? out.to(result) : out;
}

enum class Un { Neg, Exp, Log, Relu, Sqrt, Pow };

/// out = op(x) over same-shape operands of out's compute dtype; `scalar` is pow's exponent.
using UnaryKernel = void(Un op, double scalar, const char *name, const Tensor &x, const Tensor &out);
dispatch::DispatchStub<UnaryKernel> unary_stub("elementwise unary");

void unary_cpu(Un op, double scalar, const char *name, const Tensor &x, const Tensor &out) {
  kernels::dispatch(out.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
    case Un::Neg: map1<T, T>(x, out, [](T v) { return static_cast<T>(-v); }); break;
    // NaN and -0.0 pass through (torch.relu is clamp_min(x, 0)).
    case Un::Relu: map1<T, T>(x, out, [](T v) { return v < T(0) ? T(0) : v; }); break;
    case Un::Exp:
      if constexpr (std::is_same_v<T, float>)
        map1<float, float>(x, out, [](float v) { return kernels::exp_f32(v); },
                                  [](const float *v, float *z, int64_t n) { kernels::exp_f32_contiguous(v, z, n); });
      else
        map1<T, T>(x, out, [](T v) { return static_cast<T>(std::exp(v)); });
      break;
    case Un::Log: map1<T, T>(x, out, [](T v) { return static_cast<T>(std::log(v)); }); break;
    case Un::Sqrt: map1<T, T>(x, out, [](T v) { return static_cast<T>(std::sqrt(v)); }); break;
    case Un::Pow: {
      const T e = static_cast<T>(scalar);
      map1<T, T>(x, out, [e](T v) { return static_cast<T>(std::pow(v, e)); });
      break;
    }
    }
  });
}
const dispatch::KernelRegistrar<UnaryKernel> unary_cpu_reg(unary_stub, DeviceType::CPU, unary_cpu);

/// The dialect op of a unary kernel (traced; the CUDA kernel's form).
ir::OpKind unary_kind(Un op) {
  switch (op) {
  case Un::Neg: return ir::OpKind::Neg;
  case Un::Exp: return ir::OpKind::Exp;
  case Un::Log: return ir::OpKind::Log;
  case Un::Relu: return ir::OpKind::Relu;
  case Un::Sqrt: return ir::OpKind::Sqrt;
  case Un::Pow: return ir::OpKind::Pow;
  }
  return ir::OpKind::Neg;
}

Tensor unary(const Tensor &a, Un op, const char *name) {
  check_defined(a, name, "input");
  KILN_CHECK(a.dtype() != kBool, name, ": not supported for bool tensors; convert with .to() first");
  const bool needs_float = op != Un::Neg && op != Un::Relu;
  const DType result = (needs_float && !a.is_floating_point()) ? kFloat32 : a.dtype();
  const DType compute = compute_type(result);
  Tensor x = a.to(compute);
  Tensor out = Tensor::empty(x.sizes(), compute, x.device());
  unary_stub(name, x.device().type, op, 0.0, name, x, out);
  if (op != Un::Pow) trace::record(unary_kind(op), {x}, out);  // pow() records itself (with its exponent)
  if (autograd::any_requires_grad({x})) {
    Tensor saved_out = out.detach();  // saving the output itself would be a reference cycle
    switch (op) {
    case Un::Neg:
      autograd::record(out, "NegBackward", {x}, {},
                       [](const TensorList &g, const TensorList &) -> TensorList { return {-g[0]}; });
      break;
    case Un::Exp:
      autograd::record(out, "ExpBackward", {x}, {saved_out},
                       [](const TensorList &g, const TensorList &s) -> TensorList { return {g[0] * s[0]}; });
      break;
    case Un::Log:
      autograd::record(out, "LogBackward", {x}, {x},
                       [](const TensorList &g, const TensorList &s) -> TensorList { return {g[0] / s[0]}; });
      break;
    case Un::Relu:
      autograd::record(out, "ReluBackward", {x}, {saved_out}, [](const TensorList &g, const TensorList &s) -> TensorList {
        // threshold_backward: zero where the result is <= 0; NaN keeps g (as torch).
        return {where(le(s[0], zeros({}, s[0].dtype())), zeros({}, g[0].dtype()), g[0])};
      });
      break;
    case Un::Sqrt:
      autograd::record(out, "SqrtBackward", {x}, {saved_out}, [](const TensorList &g, const TensorList &s) -> TensorList {
        return {g[0] / (s[0] * 2.0)};
      });
      break;
    case Un::Pow: break;
    }
  }
  return result != compute ? out.to(result) : out;
}

/// out (bool) = x (pred) y over same-shape operands of one compute dtype.
using CompareKernel = void(ir::Predicate pred, const char *name, const Tensor &x, const Tensor &y, const Tensor &out);
dispatch::DispatchStub<CompareKernel> compare_stub("comparison");

void compare_cpu(ir::Predicate pred, const char *name, const Tensor &x, const Tensor &y, const Tensor &out) {
  kernels::dispatch(x.dtype(), name, [&](auto zero) {
    using T = decltype(zero);
    auto run = [&](auto cmp) { map2<uint8_t, T, T>(x, y, out, [&](T p, T q) { return static_cast<uint8_t>(cmp(p, q)); }); };
    switch (pred) {
    case ir::Predicate::EQ: run([](T p, T q) { return p == q; }); break;
    case ir::Predicate::NE: run([](T p, T q) { return p != q; }); break;
    case ir::Predicate::LT: run([](T p, T q) { return p < q; }); break;
    case ir::Predicate::LE: run([](T p, T q) { return p <= q; }); break;
    case ir::Predicate::GT: run([](T p, T q) { return p > q; }); break;
    case ir::Predicate::GE: run([](T p, T q) { return p >= q; }); break;
    }
  });
}
const dispatch::KernelRegistrar<CompareKernel> compare_cpu_reg(compare_stub, DeviceType::CPU, compare_cpu);

Tensor compare(const Tensor &a, const Tensor &b, ir::Predicate pred, const char *name) {
  check_defined(a, name, "first operand");
  check_defined(b, name, "second operand");
  const Device device = dispatch::common_device(name, {&a, &b});
  DType common = promote_types(a.dtype(), b.dtype());
  const DType compute = common == kBool ? kInt64 : compute_type(common);
  auto [x, y] = prepare(a, b, compute, device, name);
  Tensor out = Tensor::empty(x.sizes(), kBool, device);
  compare_stub(name, device.type, pred, name, x, y, out);
  trace::Attrs attrs;
  attrs.predicate = pred;
  trace::record(ir::OpKind::Compare, {x, y}, out, attrs);
  return out;
}

/// c ? a : b on the bits of an element, without a branch.
template <class U> inline U select_value(uint8_t c, U a, U b) {
  const U mask = static_cast<U>(U(0) - static_cast<U>(c != 0));
  return static_cast<U>((a & mask) | (b & static_cast<U>(~mask)));
}

/// out = c ? x : y over same-shape strided operands, copying elements as
/// `U` (an unsigned type of the element size); out contiguous.
template <class U> void select_kernel(const Tensor &c, const Tensor &x, const Tensor &y, const Tensor &out) {
  const uint8_t *pc = reinterpret_cast<const uint8_t *>(kernels::storage_base(c));
  const U *px = reinterpret_cast<const U *>(kernels::storage_base(x));
  const U *py = reinterpret_cast<const U *>(kernels::storage_base(y));
  U *po = static_cast<U *>(out.raw_data());
  const auto it = kernels::make_iter<3>(c.sizes(), {&c.strides(), &x.strides(), &y.strides()},
                                        {c.storage_offset(), x.storage_offset(), y.storage_offset()});
  kernels::parallel_rows(it, [&](int64_t w, std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
    const uint8_t *__restrict cc = pc + off[0];
    const U *__restrict xx = px + off[1];
    const U *__restrict yy = py + off[2];
    U *__restrict z = po + w;
    // Both values are loaded before the select, so GCC if-converts and
    // vectorizes the loops (a conditional load kept them scalar and branchy).
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) z[i] = select_value(cc[i], xx[i], yy[i]);
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const U x0 = xx[0];
      for (int64_t i = 0; i < n; ++i) z[i] = select_value(cc[i], x0, yy[i]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const U y0 = yy[0];
      for (int64_t i = 0; i < n; ++i) z[i] = select_value(cc[i], xx[i], y0);
    } else {
      for (int64_t i = 0; i < n; ++i) z[i] = cc[i * st[0]] ? xx[i * st[1]] : yy[i * st[2]];
    }
  });
}

/// out = c ? x : y over same-shape operands (x, y and out of one dtype).
using SelectKernel = void(const Tensor &c, const Tensor &x, const Tensor &y, const Tensor &out);
dispatch::DispatchStub<SelectKernel> select_stub("where");

void select_cpu(const Tensor &c, const Tensor &x, const Tensor &y, const Tensor &out) {
  switch (itemsize(out.dtype())) {
  case 1: select_kernel<uint8_t>(c, x, y, out); break;
  case 2: select_kernel<uint16_t>(c, x, y, out); break;
  case 4: select_kernel<uint32_t>(c, x, y, out); break;
  default: select_kernel<uint64_t>(c, x, y, out); break;
  }
}
const dispatch::KernelRegistrar<SelectKernel> select_cpu_reg(select_stub, DeviceType::CPU, select_cpu);

// ---- CUDA: each op's dialect form through the CUDA C emitter (dispatch::run_graph_kernel) ----

void binary_cuda(Bin op, const char *name, const Tensor &x, const Tensor &y, const Tensor &out) {
  // Integer division by zero gives 0 in a generated kernel (codegen/cuda's
  // prelude) where the CPU raises; checking needs a device reduction and a
  // synchronization, so this raises as the CPU does, at that cost.
  if (is_integer_division(op) && !is_floating_point(y.dtype()))
    KILN_CHECK(!dispatch::device_has_zero(y), name, ": ZeroDivisionError: integer division by zero (an element "
               "of the divisor is 0, dtype ", dtype_name(y.dtype()), ")");
  dispatch::run_graph_kernel(name, dispatch::graph_node(binary_kind(op)), {x, y}, {out});
}
const dispatch::KernelRegistrar<BinaryKernel> binary_cuda_reg(binary_stub, DeviceType::CUDA, binary_cuda);

void unary_cuda(Un op, double scalar, const char *name, const Tensor &x, const Tensor &out) {
  dispatch::run_graph_kernel(name, dispatch::graph_node(unary_kind(op), {}, false, scalar), {x}, {out});
}
const dispatch::KernelRegistrar<UnaryKernel> unary_cuda_reg(unary_stub, DeviceType::CUDA, unary_cuda);

void compare_cuda(ir::Predicate pred, const char *name, const Tensor &x, const Tensor &y, const Tensor &out) {
  dispatch::run_graph_kernel(name, dispatch::graph_node(ir::OpKind::Compare, {}, false, 0.0, pred), {x, y}, {out});
}
const dispatch::KernelRegistrar<CompareKernel> compare_cuda_reg(compare_stub, DeviceType::CUDA, compare_cuda);

void select_cuda(const Tensor &c, const Tensor &x, const Tensor &y, const Tensor &out) {
  dispatch::run_graph_kernel("where", dispatch::graph_node(ir::OpKind::Select), {c, x, y}, {out});
}
const dispatch::KernelRegistrar<SelectKernel> select_cuda_reg(select_stub, DeviceType::CUDA, select_cuda);

}  // namespace

namespace kernels {

void parallel_chunks(int64_t n, int64_t chunk, RangeFn fn) {
  const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) fn.call(fn.ctx, c * chunk, std::min(n, (c + 1) * chunk));
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void exp_f32_contiguous(const float *__restrict x, float *__restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_f32(x[i]);
}

}  // namespace kernels

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == kBool) return b;
  if (b == kBool) return a;
  const bool fa = is_floating_point(a), fb = is_floating_point(b);
  if (fa != fb) return fa ? a : b;  // int with float -> the float type
  if (!fa) return kInt64;           // int32 with int64
  if (a == kFloat64 || b == kFloat64) return kFloat64;
  return kFloat32;                  // float16/bfloat16/float32 mixes
}

Shape broadcast_shapes(const Shape &a, const Shape &b, const char *op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor &grad, const Shape &shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t i = 0; i < grad.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && grad.size(i) != 1)) dims.push_back(i);
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

Tensor add(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Add, "add"); }
Tensor sub(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Sub, "sub"); }
Tensor mul(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Mul, "mul"); }
Tensor div(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Div, "div"); }
Tensor maximum(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Max, "maximum"); }
Tensor minimum(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Min, "minimum"); }
Tensor max(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Max, "max"); }
Tensor min(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Min, "min"); }
Tensor floor_divide(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::FloorDiv, "floor_divide"); }
Tensor remainder(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Rem, "remainder"); }
Tensor fmod(const Tensor &a, const Tensor &b) { return binary(a, b, Bin::Fmod, "fmod"); }

Tensor div(const Tensor &a, const Tensor &b, const std::string &rounding_mode) {
  KILN_CHECK(rounding_mode == "trunc" || rounding_mode == "floor", "div: rounding_mode must be \"trunc\" or \"floor\", got \"",
             rounding_mode, "\"");
  if (rounding_mode == "floor") return binary(a, b, Bin::FloorDiv, "div");
  check_defined(a, "div", "first operand");
  check_defined(b, "div", "second operand");
  if (!is_floating_point(promote_arith(a.dtype(), b.dtype(), "div"))) return binary(a, b, Bin::TruncDiv, "div");
  // Floats: trunc(a / b) (aten's div_trunc), with a zero gradient (as
  // PyTorch: a rounded quotient is piecewise constant).
  Tensor out;
  {
    NoGradGuard no_grad;
    out = trunc(div(a, b));
  }
  if (autograd::any_requires_grad({a, b})) {
    const Shape sa = a.sizes(), sb = b.sizes();
    const DType da = a.dtype(), db = b.dtype();
    const Device device = out.device();
    autograd::record(out, "DivBackward", {a, b}, {}, [=](const TensorList &, const TensorList &) -> TensorList {
      return {zeros(sa, da, device), zeros(sb, db, device)};
    });
  }
  return out;
}
Tensor neg(const Tensor &a) { return unary(a, Un::Neg, "neg"); }
Tensor exp(const Tensor &a) {
  amp::detail::AutocastOp ac("exp");
  if (ac) return exp(ac.cast(a));
  return unary(a, Un::Exp, "exp");
}
Tensor log(const Tensor &a) {
  amp::detail::AutocastOp ac("log");
  if (ac) return log(ac.cast(a));
  return unary(a, Un::Log, "log");
}
Tensor relu(const Tensor &a) { return unary(a, Un::Relu, "relu"); }
Tensor sqrt(const Tensor &a) {
  amp::detail::AutocastOp ac("sqrt");
  if (ac) return sqrt(ac.cast(a));
  return unary(a, Un::Sqrt, "sqrt");
}

Tensor pow(const Tensor &a, double exponent) {
  amp::detail::AutocastOp ac("pow");
  if (ac) return pow(ac.cast(a), exponent);
  check_defined(a, "pow", "input");
  KILN_CHECK(a.is_floating_point(), "pow: expected a floating point tensor, got ", dtype_name(a.dtype()));
  const DType compute = compute_type(a.dtype());
  Tensor x = a.to(compute);
  Tensor out = Tensor::empty(x.sizes(), compute, x.device());
  unary_stub("pow", x.device().type, Un::Pow, exponent, "pow", x, out);
  trace::Attrs pow_attrs;
  pow_attrs.scalar = exponent;
  trace::record(ir::OpKind::Pow, {x}, out, pow_attrs);
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "PowBackward", {x}, {x}, [exponent](const TensorList &g, const TensorList &s) -> TensorList {
      // x^0 is the constant 1: its gradient is 0 everywhere, also at x = 0
      // where the general formula gives 0 * inf = NaN (torch's pow_backward).
      if (exponent == 0.0) return {zeros(s[0].sizes(), g[0].dtype(), g[0].device())};
      return {g[0] * pow(s[0], exponent - 1.0) * exponent};
    });
  return a.dtype() != compute ? out.to(a.dtype()) : out;
}

Tensor eq(const Tensor &a, const Tensor &b) { return compare(a, b, ir::Predicate::EQ, "eq"); }
Tensor ne(const Tensor &a, const Tensor &b) { return compare(a, b, ir::Predicate::NE, "ne"); }
Tensor lt(const Tensor &a, const Tensor &b) { return compare(a, b, ir::Predicate::LT, "lt"); }
Tensor le(const Tensor &a, const Tensor &b) { return compare(a, b, ir::Predicate::LE, "le"); }
Tensor gt(const Tensor &a, const Tensor &b) { return compare(a, b, ir::Predicate::GT, "gt"); }
Tensor ge(const Tensor &a, const Tensor &b) { return compare(a, b, ir::Predicate::GE, "ge"); }

Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b) {
  check_defined(cond, "where", "condition");
  check_defined(a, "where", "first value");
  check_defined(b, "where", "second value");
  KILN_CHECK(cond.dtype() == kBool, "where: condition must be a bool tensor, got ", dtype_name(cond.dtype()));
  DType result = promote_types(a.dtype(), b.dtype());
  const DType compute = compute_type(result);
  Shape s = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  const Device device = dispatch::common_device("where", {&cond, &a, &b});
  Tensor c = dispatch::move_scalar(cond, device).expand(s);
  Tensor x = dispatch::move_scalar(a.to(compute), device).expand(s);
  Tensor y = dispatch::move_scalar(b.to(compute), device).expand(s);
  Tensor out = Tensor::empty(s, compute, device);
  select_stub("where", device.type, c, x, y, out);
  trace::record(ir::OpKind::Select, {c, x, y}, out);
  if (autograd::any_requires_grad({x, y}))
    autograd::record(out, "WhereBackward", {c, x, y}, {c}, [](const TensorList &g, const TensorList &s) -> TensorList {
      Tensor zero = zeros({}, g[0].dtype());
      return {Tensor(), where(s[0], g[0], zero), where(s[0], zero, g[0])};
    });
  return result != compute ? out.to(result) : out;
}

// ---- Tensor methods and operators --------------------------------------------

/// A 0-d tensor for `value` that promotes like a Python scalar with `t`.
static Tensor scalar_like(const Tensor &t, double value) {
  // A Python number does not raise the tensor's dtype within its category
  // (float16 * 2.0 stays float16; int32 + 1 stays int32).
  const bool integral = std::nearbyint(value) == value;
  DType d = kFloat32;
  if (t.is_floating_point()) d = t.dtype();
  else if (integral) d = t.dtype() == kBool ? kInt64 : t.dtype();
  return full({}, value, d, t.device());
}

Tensor Tensor::add(const Tensor &o) const { return kiln::add(*this, o); }
Tensor Tensor::sub(const Tensor &o) const { return kiln::sub(*this, o); }
Tensor Tensor::mul(const Tensor &o) const { return kiln::mul(*this, o); }
Tensor Tensor::div(const Tensor &o) const { return kiln::div(*this, o); }
Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::pow(double e) const { return kiln::pow(*this, e); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }

Tensor operator+(const Tensor &a, const Tensor &b) { return add(a, b); }
Tensor operator-(const Tensor &a, const Tensor &b) { return sub(a, b); }
Tensor operator*(const Tensor &a, const Tensor &b) { return mul(a, b); }
Tensor operator/(const Tensor &a, const Tensor &b) { return div(a, b); }
Tensor operator+(const Tensor &a, double b) { return add(a, scalar_like(a, b)); }
Tensor operator-(const Tensor &a, double b) { return sub(a, scalar_like(a, b)); }
Tensor operator*(const Tensor &a, double b) { return mul(a, scalar_like(a, b)); }
Tensor operator/(const Tensor &a, double b) { return div(a, scalar_like(a, b)); }
Tensor operator*(double a, const Tensor &b) { return mul(scalar_like(b, a), b); }
Tensor operator-(const Tensor &a) { return neg(a); }

}  // namespace kiln
