// Elementwise ops: arithmetic, unary math, comparisons, where.
// Each op: check -> promote -> broadcast (expand, a traced view) -> kernel on
// same-shape operands -> trace record -> autograd record.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "kernels.h"
#include "../trace.h"

namespace kiln {
namespace {

using autograd::TensorList;

void check_defined(const Tensor &t, const char *op, const char *what) {
  KILN_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  KILN_CHECK(t.device().is_cpu(), op, ": ", what, " is on ", t.device().str(),
             "; only cpu tensors are supported in this build");
}

bool is_half(DType t) { return t == kFloat16 || t == kBFloat16; }

/// PyTorch-style promotion for arithmetic. Bool arithmetic is rejected.
DType promote(DType a, DType b, const char *op) {
  KILN_CHECK(a != kBool && b != kBool, op, ": arithmetic on bool tensors is not supported (got ",
             dtype_name(a), " and ", dtype_name(b), "); convert with .to(kiln::kFloat32) first");
  if (a == b) return a;
  if (is_floating_point(a) && is_floating_point(b)) return kFloat32;
  if (is_floating_point(a)) return a;
  if (is_floating_point(b)) return b;
  return kInt64;
}

/// Output of an elementwise kernel over same-shape operands.
template <class TO, class TA, class TB, class F>
void map2(const Tensor &a, const Tensor &b, const Tensor &out, F f) {
  TO *o = static_cast<TO *>(out.raw_data());
  const TA *pa = reinterpret_cast<const TA *>(kernels::storage_base(a));
  const TB *pb = reinterpret_cast<const TB *>(kernels::storage_base(b));
  int64_t w = 0;
  kernels::for_each_row<2>(a.sizes(), {&a.strides(), &b.strides()}, {a.storage_offset(), b.storage_offset()},
                           [&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
                             const TA *x = pa + off[0];
                             const TB *y = pb + off[1];
                             TO *z = o + w;
                             if (st[0] == 1 && st[1] == 1) {
                               for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
                             } else if (st[0] == 1 && st[1] == 0) {
                               const TB y0 = y[0];
                               for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y0);
                             } else {
                               for (int64_t i = 0; i < n; ++i) z[i] = f(x[i * st[0]], y[i * st[1]]);
                             }
                             w += n;
                           });
}

template <class TO, class TA, class F> void map1(const Tensor &a, const Tensor &out, F f) {
  TO *o = static_cast<TO *>(out.raw_data());
  const TA *pa = reinterpret_cast<const TA *>(kernels::storage_base(a));
  int64_t w = 0;
  kernels::for_each_row<1>(a.sizes(), {&a.strides()}, {a.storage_offset()},
                           [&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
                             const TA *x = pa + off[0];
                             TO *z = o + w;
                             if (st[0] == 1)
                               for (int64_t i = 0; i < n; ++i) z[i] = f(x[i]);
                             else
                               for (int64_t i = 0; i < n; ++i) z[i] = f(x[i * st[0]]);
                             w += n;
                           });
}

/// A same-dtype binary kernel for float32 or int64.
template <class F> Tensor binary_kernel(const Tensor &x, const Tensor &y, F f) {
  Tensor out = Tensor::empty(x.sizes(), x.dtype());
  if (x.dtype() == kFloat32)
    map2<float, float, float>(x, y, out, [&](float a, float b) { return static_cast<float>(f(a, b)); });
  else
    map2<int64_t, int64_t, int64_t>(x, y, out, [&](int64_t a, int64_t b) { return static_cast<int64_t>(f(a, b)); });
  return out;
}

/// Promotes and broadcasts two operands to one compute type and shape.
std::pair<Tensor, Tensor> prepare(const Tensor &a, const Tensor &b, DType compute, const char *op) {
  Shape s = broadcast_shapes(a.sizes(), b.sizes(), op);
  return {a.to(compute).expand(s), b.to(compute).expand(s)};
}

enum class Bin { Add, Sub, Mul, Div, Max };

ir::OpKind kind_of(Bin op) {
  switch (op) {
  case Bin::Add: return ir::OpKind::Add;
  case Bin::Sub: return ir::OpKind::Sub;
  case Bin::Mul: return ir::OpKind::Mul;
  case Bin::Div: return ir::OpKind::Div;
  case Bin::Max: break;
  }
  return ir::OpKind::Add;
}

Tensor binary(const Tensor &a, const Tensor &b, Bin op, const char *name) {
  check_defined(a, name, "first operand");
  check_defined(b, name, "second operand");
  DType result = promote(a.dtype(), b.dtype(), name);
  if (op == Bin::Div && result == kInt64) result = kFloat32;  // true division
  const DType compute = is_half(result) ? kFloat32 : result;
  auto [x, y] = prepare(a, b, compute, name);
  Tensor out;
  switch (op) {
  case Bin::Add: out = binary_kernel(x, y, [](auto p, auto q) { return p + q; }); break;
  case Bin::Sub: out = binary_kernel(x, y, [](auto p, auto q) { return p - q; }); break;
  case Bin::Mul: out = binary_kernel(x, y, [](auto p, auto q) { return p * q; }); break;
  case Bin::Div: out = binary_kernel(x, y, [](auto p, auto q) { return p / q; }); break;
  case Bin::Max: out = binary_kernel(x, y, [](auto p, auto q) { return p > q ? p : q; }); break;
  }
  if (op == Bin::Max)
    trace::unsupported("maximum");
  else
    trace::record(kind_of(op), {x, y}, out);
  if (autograd::any_requires_grad({x, y})) {
    switch (op) {
    case Bin::Add:
      autograd::record(out, "AddBackward", {x, y}, [](const TensorList &g) -> TensorList { return {g[0], g[0]}; });
      break;
    case Bin::Sub:
      autograd::record(out, "SubBackward", {x, y}, [](const TensorList &g) -> TensorList { return {g[0], -g[0]}; });
      break;
    case Bin::Mul:
      autograd::record(out, "MulBackward", {x, y}, [x = x, y = y](const TensorList &g) -> TensorList {
        return {g[0] * y, g[0] * x};
      });
      break;
    case Bin::Div:
      autograd::record(out, "DivBackward", {x, y}, [x = x, y = y](const TensorList &g) -> TensorList {
        return {g[0] / y, -(g[0] * x) / (y * y)};
      });
      break;
    case Bin::Max:
      autograd::record(out, "MaximumBackward", {x, y}, [x = x, y = y](const TensorList &g) -> TensorList {
        Tensor zero = zeros({}, g[0].dtype());
        Tensor half = where(eq(x, y), g[0] * 0.5, zero);
        return {where(gt(x, y), g[0], half), where(lt(x, y), g[0], half)};
      });
      break;
    }
  }
  return result != compute ? out.to(result) : out;
}

enum class Un { Neg, Exp, Log, Relu, Sqrt };

Tensor unary(const Tensor &a, Un op, const char *name) {
  check_defined(a, name, "input");
  KILN_CHECK(a.dtype() != kBool, name, ": not supported for bool tensors; convert with .to() first");
  const bool needs_float = op != Un::Neg && op != Un::Relu;
  const DType result = (needs_float && a.dtype() == kInt64) ? kFloat32 : a.dtype();
  const DType compute = is_half(result) ? kFloat32 : result;
  Tensor x = a.to(compute);
  Tensor out = Tensor::empty(x.sizes(), compute);
  if (compute == kFloat32) {
    switch (op) {
    case Un::Neg: map1<float, float>(x, out, [](float v) { return -v; }); break;
    case Un::Exp: map1<float, float>(x, out, [](float v) { return std::exp(v); }); break;
    case Un::Log: map1<float, float>(x, out, [](float v) { return std::log(v); }); break;
    case Un::Relu: map1<float, float>(x, out, [](float v) { return v > 0.0f ? v : 0.0f; }); break;
    case Un::Sqrt: map1<float, float>(x, out, [](float v) { return std::sqrt(v); }); break;
    }
  } else {
    if (op == Un::Neg) map1<int64_t, int64_t>(x, out, [](int64_t v) { return -v; });
    else map1<int64_t, int64_t>(x, out, [](int64_t v) { return v > 0 ? v : int64_t{0}; });
  }
  switch (op) {
  case Un::Neg: trace::record(ir::OpKind::Neg, {x}, out); break;
  case Un::Exp: trace::record(ir::OpKind::Exp, {x}, out); break;
  case Un::Log: trace::record(ir::OpKind::Log, {x}, out); break;
  case Un::Relu: trace::record(ir::OpKind::Relu, {x}, out); break;
  case Un::Sqrt: trace::unsupported("sqrt"); break;
  }
  if (autograd::any_requires_grad({x})) {
    Tensor saved_out = out.detach();  // no reference cycle through grad_fn
    switch (op) {
    case Un::Neg:
      autograd::record(out, "NegBackward", {x}, [](const TensorList &g) -> TensorList { return {-g[0]}; });
      break;
    case Un::Exp:
      autograd::record(out, "ExpBackward", {x}, [saved_out](const TensorList &g) -> TensorList {
        return {g[0] * saved_out};
      });
      break;
    case Un::Log:
      autograd::record(out, "LogBackward", {x}, [x](const TensorList &g) -> TensorList { return {g[0] / x}; });
      break;
    case Un::Relu:
      autograd::record(out, "ReluBackward", {x}, [saved_out](const TensorList &g) -> TensorList {
        return {where(gt(saved_out, zeros({}, saved_out.dtype())), g[0], zeros({}, g[0].dtype()))};
      });
      break;
    case Un::Sqrt:
      autograd::record(out, "SqrtBackward", {x}, [saved_out](const TensorList &g) -> TensorList {
        return {g[0] / (saved_out * 2.0)};
      });
      break;
    }
  }
  return result != compute ? out.to(result) : out;
}

Tensor compare(const Tensor &a, const Tensor &b, ir::Predicate pred, const char *name) {
  check_defined(a, name, "first operand");
  check_defined(b, name, "second operand");
  DType compute = (is_floating_point(a.dtype()) || is_floating_point(b.dtype())) ? kFloat32 : kInt64;
  auto [x, y] = prepare(a, b, compute, name);
  Tensor out = Tensor::empty(x.sizes(), kBool);
  auto run = [&](auto cmp) {
    if (compute == kFloat32)
      map2<uint8_t, float, float>(x, y, out, [&](float p, float q) { return static_cast<uint8_t>(cmp(p, q)); });
    else
      map2<uint8_t, int64_t, int64_t>(x, y, out, [&](int64_t p, int64_t q) { return static_cast<uint8_t>(cmp(p, q)); });
  };
  switch (pred) {
  case ir::Predicate::EQ: run([](auto p, auto q) { return p == q; }); break;
  case ir::Predicate::NE: run([](auto p, auto q) { return p != q; }); break;
  case ir::Predicate::LT: run([](auto p, auto q) { return p < q; }); break;
  case ir::Predicate::LE: run([](auto p, auto q) { return p <= q; }); break;
  case ir::Predicate::GT: run([](auto p, auto q) { return p > q; }); break;
  case ir::Predicate::GE: run([](auto p, auto q) { return p >= q; }); break;
  }
  trace::Attrs attrs;
  attrs.predicate = pred;
  trace::record(ir::OpKind::Compare, {x, y}, out, attrs);
  return out;
}

}  // namespace

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
Tensor neg(const Tensor &a) { return unary(a, Un::Neg, "neg"); }
Tensor exp(const Tensor &a) { return unary(a, Un::Exp, "exp"); }
Tensor log(const Tensor &a) { return unary(a, Un::Log, "log"); }
Tensor relu(const Tensor &a) { return unary(a, Un::Relu, "relu"); }
Tensor sqrt(const Tensor &a) { return unary(a, Un::Sqrt, "sqrt"); }

Tensor pow(const Tensor &a, double exponent) {
  check_defined(a, "pow", "input");
  KILN_CHECK(a.is_floating_point(), "pow: expected a floating point tensor, got ", dtype_name(a.dtype()));
  trace::unsupported("pow");
  Tensor x = a.to(kFloat32);
  Tensor out = Tensor::empty(x.sizes(), kFloat32);
  const float e = static_cast<float>(exponent);
  map1<float, float>(x, out, [e](float v) { return std::pow(v, e); });
  if (autograd::any_requires_grad({x}))
    autograd::record(out, "PowBackward", {x}, [x, exponent](const TensorList &g) -> TensorList {
      return {g[0] * pow(x, exponent - 1.0) * exponent};
    });
  return a.dtype() != kFloat32 ? out.to(a.dtype()) : out;
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
  DType result = promote(a.dtype(), b.dtype(), "where");
  const DType compute = is_half(result) ? kFloat32 : result;
  Shape s = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor c = cond.expand(s), x = a.to(compute).expand(s), y = b.to(compute).expand(s);
  Tensor out = Tensor::empty(s, compute);
  const uint8_t *pc = reinterpret_cast<const uint8_t *>(kernels::storage_base(c));
  const char *px = kernels::storage_base(x), *py = kernels::storage_base(y);
  char *po = static_cast<char *>(out.raw_data());
  const size_t item = itemsize(compute);
  int64_t w = 0;
  kernels::for_each_row<3>(s, {&c.strides(), &x.strides(), &y.strides()},
                           {c.storage_offset(), x.storage_offset(), y.storage_offset()},
                           [&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
                             for (int64_t i = 0; i < n; ++i, ++w) {
                               const char *src = pc[off[0] + i * st[0]] ? px + (off[1] + i * st[1]) * item
                                                                        : py + (off[2] + i * st[2]) * item;
                               std::memcpy(po + w * item, src, item);
                             }
                           });
  trace::record(ir::OpKind::Select, {c, x, y}, out);
  if (autograd::any_requires_grad({x, y}))
    autograd::record(out, "WhereBackward", {c, x, y}, [c](const TensorList &g) -> TensorList {
      Tensor zero = zeros({}, g[0].dtype());
      return {Tensor(), where(c, g[0], zero), where(c, zero, g[0])};
    });
  return result != compute ? out.to(result) : out;
}

// ---- Tensor methods and operators --------------------------------------------

/// A 0-d tensor for `value` that promotes like a Python scalar with `t`.
static Tensor scalar_like(const Tensor &t, double value) {
  bool integral = std::nearbyint(value) == value;
  DType d = t.is_floating_point() ? t.dtype() : (t.dtype() == kInt64 && integral ? kInt64 : kFloat32);
  return full({}, value, d);
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
