// Names of the plain-Graph enums (declared in kiln/ir/Graph.h).
#include "kiln/ir/Graph.h"

namespace kiln::ir {

const char *toString(OpKind kind) {
  switch (kind) {
  case OpKind::Add:
    return "Add";
  case OpKind::Sub:
    return "Sub";
  case OpKind::Mul:
    return "Mul";
  case OpKind::Div:
    return "Div";
  case OpKind::Neg:
    return "Neg";
  case OpKind::Exp:
    return "Exp";
  case OpKind::Log:
    return "Log";
  case OpKind::Relu:
    return "Relu";
  case OpKind::Sqrt:
    return "Sqrt";
  case OpKind::Rsqrt:
    return "Rsqrt";
  case OpKind::Tanh:
    return "Tanh";
  case OpKind::Abs:
    return "Abs";
  case OpKind::Sin:
    return "Sin";
  case OpKind::Cos:
    return "Cos";
  case OpKind::Pow:
    return "Pow";
  case OpKind::Compare:
    return "Compare";
  case OpKind::Select:
    return "Select";
  case OpKind::Convert:
    return "Convert";
  case OpKind::Constant:
    return "Constant";
  case OpKind::Matmul:
    return "Matmul";
  case OpKind::Transpose:
    return "Transpose";
  case OpKind::Broadcast:
    return "Broadcast";
  case OpKind::Reshape:
    return "Reshape";
  case OpKind::ReduceSum:
    return "ReduceSum";
  case OpKind::ReduceMax:
    return "ReduceMax";
  }
  return "<unknown OpKind>";
}

const char *toString(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return "f32";
  case ElementType::F16:
    return "f16";
  case ElementType::BF16:
    return "bf16";
  case ElementType::I64:
    return "i64";
  case ElementType::Bool:
    return "bool";
  case ElementType::F64:
    return "f64";
  case ElementType::I32:
    return "i32";
  }
  return "<unknown ElementType>";
}

} // namespace kiln::ir
