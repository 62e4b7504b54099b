// kiln/ir/OpTable.h - per-kind facts of the traced ops, read from Ops.def.
//
// Pure header, no MLIR types: frontend code includes it (through Graph.h).
#pragma once

#include <cstdint>

namespace kiln::ir {

/// Operation kinds of a traced Graph, one per row of Ops.def. Each maps to
/// one `kiln` dialect op (KilnOps.td).
enum class OpKind {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build) Kind,
#include "kiln/ir/Ops.def"
};

/// The number of OpKinds.
constexpr int kNumOpKinds = 0
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build) +1
#include "kiln/ir/Ops.def"
    ;

/// What an op does to memory and loops; fusion, remat and codegen group ops
/// by it.
enum class OpCategory {
  Elementwise, ///< same-shape operands, one result element per index
  Reduction,   ///< reduces `dims` of operand 0
  Contraction, ///< matmul (a GEMM launch, not fused)
  Layout,      ///< transpose/broadcast/reshape: a view at execution time
  Creation,    ///< a splat constant
};

/// How many FLOPs one execution counts (remat's and partition's model; the
/// FLOP counting of torch.utils.flop_counter for matmul, one per element for
/// the rest).
enum class FlopModel {
  Result,  ///< one per result element
  Operand, ///< one per element of operand 0 (reductions)
  Matmul,  ///< 2 * M * N * K (times the batch)
  Free,    ///< views and constants
};

/// The dialect op's name without "kiln." ("add", "reduce_sum").
constexpr const char *opMnemonic(OpKind kind) {
  switch (kind) {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  case OpKind::Kind:                                                                                               \
    return mnemonic;
#include "kiln/ir/Ops.def"
  }
  return "?";
}

/// Operand count of a traced node of `kind`.
constexpr int opNumOperands(OpKind kind) {
  switch (kind) {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  case OpKind::Kind:                                                                                               \
    return operands;
#include "kiln/ir/Ops.def"
  }
  return -1;
}

constexpr OpCategory opCategory(OpKind kind) {
  switch (kind) {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  case OpKind::Kind:                                                                                               \
    return OpCategory::category;
#include "kiln/ir/Ops.def"
  }
  return OpCategory::Creation;
}

constexpr FlopModel opFlopModel(OpKind kind) {
  switch (kind) {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  case OpKind::Kind:                                                                                               \
    return FlopModel::flops;
#include "kiln/ir/Ops.def"
  }
  return FlopModel::Free;
}

} // namespace kiln::ir
