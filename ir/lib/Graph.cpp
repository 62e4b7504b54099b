// Names of the plain-Graph enums (declared in kiln/ir/Graph.h).
#include "kiln/ir/Graph.h"

namespace kiln::ir {

const char *toString(OpKind kind) {
  switch (kind) {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  case OpKind::Kind:                                                                                               \
    return #Kind;
#include "kiln/ir/Ops.def"
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
