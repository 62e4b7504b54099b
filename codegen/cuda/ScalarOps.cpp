// One kiln elementwise op as one C expression (CudaText.h scalarExpr), with
// the semantics of the CPU target (cpu/EmitKernel.cpp, cpu/EmitScalarMath.cpp):
// ordered compares except ne, relu passing NaN and -0.0, round half to
// even, PyTorch's floor_div / remainder / fmod, kiln.convert's casts.
#include "CudaText.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/TypeSwitch.h"
#include "mlir/IR/BuiltinTypes.h"

namespace kiln::codegen::cuda::detail {

using namespace mlir;

namespace {

bool isLowFloat(Type t) { return t.isF16() || t.isBF16(); }

/// CUDA's math function name for a compute type: expf for float, exp for double.
std::string math(const char *base, Type element) {
  return element.isF64() ? std::string(base) : std::string(base) + "f";
}

Type elementOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

std::string call(const std::string &f, ArrayRef<std::string> args) {
  std::string s = f + "(";
  for (size_t i = 0; i < args.size(); ++i)
    s += (i ? ", " : "") + args[i];
  return s + ")";
}

std::string infix(const std::string &a, const char *op, const std::string &b) { return "(" + a + " " + op + " " + b + ")"; }

/// kiln.convert from `from` to `to` of a value of computeType(from).
std::string convert(const std::string &x, Type from, Type to) {
  const bool fromFloat = isa<FloatType>(from), toFloat = isa<FloatType>(to);
  if (to.isF16())
    return call("kiln_round_f16", {fromFloat ? (from.isF64() ? "(float)" + x : x) : "(float)" + x});
  if (to.isBF16())
    return call("kiln_round_bf16", {fromFloat ? (from.isF64() ? "(float)" + x : x) : "(float)" + x});
  if (computeType(from) == computeType(to))
    return x;
  if (to.isInteger(1))
    return fromFloat ? "(" + x + " != 0)" : "(" + x + " != 0)";
  if (from.isInteger(1))
    return "(" + x + " ? " + literal(1.0, to) + " : " + literal(0.0, to) + ")";
  if (fromFloat && !toFloat)
    return to.isInteger(64) ? call("kiln_to_i64", {x}) : "(int)" + x;
  return "(" + computeType(to) + ")" + x;
}

/// x ^ e as torch.pow(tensor, float) in the CPU target: +-0.5 are sqrt and
/// 1 / sqrt, small integral exponents multiplications in binary
/// exponentiation order (kiln_powi), anything else pow.
std::string power(const std::string &x, Type element, double e) {
  const std::string one = literal(1.0, element);
  if (e == 0.5)
    return call(math("sqrt", element), {x});
  if (e == -0.5)
    return "(" + one + " / " + call(math("sqrt", element), {x}) + ")";
  if (e == std::trunc(e) && std::fabs(e) <= 64.0) {
    const int n = static_cast<int>(std::fabs(e));
    if (n == 0)
      return one;
    std::string p = call("kiln_powi", {x, std::to_string(n)});
    return e < 0 ? "(" + one + " / " + p + ")" : p;
  }
  return call(math("pow", element), {x, literal(e, element)});
}

std::string compare(ir::ComparePredicate p, ArrayRef<std::string> a) {
  // C's operators are the ordered predicates, and != is true for NaN (une), as torch.
  switch (p) {
  case ir::ComparePredicate::eq:
    return infix(a[0], "==", a[1]);
  case ir::ComparePredicate::ne:
    return infix(a[0], "!=", a[1]);
  case ir::ComparePredicate::lt:
    return infix(a[0], "<", a[1]);
  case ir::ComparePredicate::le:
    return infix(a[0], "<=", a[1]);
  case ir::ComparePredicate::gt:
    return infix(a[0], ">", a[1]);
  case ir::ComparePredicate::ge:
    return infix(a[0], ">=", a[1]);
  }
  return "";
}

/// Unary float math by CUDA's name; integers: the rounding ops are the identity.
std::string unaryMath(Operation *op, const std::string &x, Type element) {
  const bool isFloat = isa<FloatType>(element);
  return TypeSwitch<Operation *, std::string>(op)
      .Case([&](ir::ExpOp) { return call(math("exp", element), {x}); })
      .Case([&](ir::LogOp) { return call(math("log", element), {x}); })
      .Case([&](ir::SqrtOp) { return call(math("sqrt", element), {x}); })
      .Case([&](ir::RsqrtOp) { return "(" + literal(1.0, element) + " / " + call(math("sqrt", element), {x}) + ")"; })
      .Case([&](ir::TanhOp) { return call(math("tanh", element), {x}); })
      .Case([&](ir::SinOp) { return call(math("sin", element), {x}); })
      .Case([&](ir::CosOp) { return call(math("cos", element), {x}); })
      .Case([&](ir::ErfOp) { return call(math("erf", element), {x}); })
      .Case([&](ir::FloorOp) { return isFloat ? call(math("floor", element), {x}) : x; })
      .Case([&](ir::CeilOp) { return isFloat ? call(math("ceil", element), {x}) : x; })
      .Case([&](ir::RoundOp) { return isFloat ? call(math("rint", element), {x}) : x; }) // half to even
      .Case([&](ir::TruncOp) { return isFloat ? call(math("trunc", element), {x}) : x; })
      .Default([](Operation *) { return std::string(); });
}

} // namespace

std::string storageType(Type element) {
  if (element.isF32())
    return "float";
  if (element.isF64())
    return "double";
  if (element.isF16())
    return "kiln_half";
  if (element.isBF16())
    return "kiln_bf16";
  if (element.isInteger(64))
    return "long long";
  if (element.isInteger(32))
    return "int";
  if (element.isInteger(1))
    return "unsigned char";
  return "";
}

std::string computeType(Type element) {
  if (isLowFloat(element))
    return "float";
  if (element.isInteger(1))
    return "bool";
  return storageType(element);
}

int64_t storageBytes(Type element) {
  if (element.isInteger(1))
    return 1;
  return (element.getIntOrFloatBitWidth() + 7) / 8;
}

std::string literal(double value, Type element) {
  if (element.isInteger(1))
    return value != 0.0 ? "true" : "false";
  if (element.isInteger()) {
    auto v = static_cast<int64_t>(value);
    if (v == INT64_MIN)
      return "(-9223372036854775807LL - 1)";
    return std::to_string(v) + (element.isInteger(64) ? "LL" : "");
  }
  if (isLowFloat(element)) { // the value the constant holds: rounded to its type
    llvm::APFloat f(value);
    bool lost = false;
    f.convert(cast<FloatType>(element).getFloatSemantics(), llvm::APFloat::rmNearestTiesToEven, &lost);
    value = f.convertToDouble();
  }
  const bool f64 = element.isF64();
  if (std::isnan(value))
    return f64 ? "kiln_bits_double(0x7ff8000000000000ull)" : "kiln_bits_float(0x7fc00000u)";
  if (std::isinf(value)) {
    std::string inf = f64 ? "kiln_bits_double(0x7ff0000000000000ull)" : "kiln_bits_float(0x7f800000u)";
    return value < 0 ? "(-" + inf + ")" : inf;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, f64 ? "%.17g" : "%.9g", f64 ? value : static_cast<double>(static_cast<float>(value)));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return f64 ? s : s + "f";
}

FailureOr<std::string> scalarExpr(Operation *op, ArrayRef<std::string> a, std::string *error) {
  Type element = elementOf(op->getResult(0));
  Type compute = isLowFloat(element) ? FloatType::getF32(op->getContext()) : element;
  const bool isFloat = isa<FloatType>(compute);
  if (std::string m = unaryMath(op, a.empty() ? "" : a[0], compute); !m.empty())
    return m;
  std::string s = TypeSwitch<Operation *, std::string>(op)
                      .Case([&](ir::AddOp) { return infix(a[0], "+", a[1]); })
                      .Case([&](ir::SubOp) { return infix(a[0], "-", a[1]); })
                      .Case([&](ir::MulOp) { return infix(a[0], "*", a[1]); })
                      .Case([&](ir::DivOp) { return isFloat ? infix(a[0], "/", a[1]) : call("kiln_div", a); })
                      .Case([&](ir::NegOp) { return "(-" + a[0] + ")"; })
                      .Case([&](ir::AbsOp) { return call("kiln_abs", a); })
                      .Case([&](ir::ReluOp) { return call("kiln_relu", a); })
                      .Case([&](ir::PowOp p) { return power(a[0], compute, p.getExponent().convertToDouble()); })
                      .Case([&](ir::CompareOp c) { return compare(c.getPredicate(), a); })
                      .Case([&](ir::SelectOp) { return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")"; })
                      .Case([&](ir::ConvertOp c) { return convert(a[0], elementOf(c.getInput()), element); })
                      .Case([&](ir::MaximumOp) { return call("kiln_maximum", a); })
                      .Case([&](ir::MinimumOp) { return call("kiln_minimum", a); })
                      .Case([&](ir::FloorDivOp) { return call("kiln_floor_div", a); })
                      .Case([&](ir::RemainderOp) { return call("kiln_remainder", a); })
                      .Case([&](ir::FmodOp) { return call("kiln_fmod", a); })
                      .Default([](Operation *) { return std::string(); });
  if (s.empty()) {
    *error = "cuda emitter: " + op->getName().getStringRef().str() + " is not an elementwise op";
    return failure();
  }
  return s;
}

} // namespace kiln::codegen::cuda::detail
