// kiln/ir/OpTable.h - per-kind facts of the traced ops, read from Ops.def.
//
// Pure header, no MLIR types: frontend code includes it (through Graph.h).
#pragma once

#include <cstddef>
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
  Reduction,   ///< reduces `dims` of operand 0 (kiln.cumsum: scans its one dim, keeping the shape)
  Contraction, ///< matmul (a GEMM launch, not fused)
  Layout,      ///< transpose/broadcast/reshape: a view at execution time
  Creation,    ///< a splat constant
  Extern,      ///< conv / pool: one library (oneDNN) launch, not fused, like a GEMM
  Indexing,    ///< gather / scatter_add: addresses read from an index tensor (checked on every call)
};

/// How many FLOPs one execution counts (remat's and partition's model; the
/// FLOP counting of torch.utils.flop_counter for matmul, one per element for
/// the rest).
enum class FlopModel {
  Result,  ///< one per result element
  Operand, ///< one per element of operand 0 (reductions)
  Matmul,  ///< 2 * M * N * K (times the batch)
  Conv,    ///< 2 * N * Cout * Hout * Wout * (Cin / groups) * kH * kW, for the forward and both gradients
  Free,    ///< views and constants
};

/// One row of Ops.def (the columns other layers read by OpKind).
struct OpInfo {
  const char *mnemonic; ///< the dialect op's name without "kiln." ("add", "reduce_sum")
  int operands;         ///< operand count of a traced node
  OpCategory category;
  FlopModel flops;
};

/// The rows of Ops.def, indexed by OpKind.
inline constexpr OpInfo kOpTable[] = {
#define KILN_OP(Kind, OpClass, mnemonic, operands, category, flops, autocast, build)                              \
  {mnemonic, operands, OpCategory::category, FlopModel::flops},
#include "kiln/ir/Ops.def"
};

static_assert(sizeof(kOpTable) / sizeof(OpInfo) == static_cast<size_t>(kNumOpKinds));

constexpr const OpInfo &opInfo(OpKind kind) { return kOpTable[static_cast<int>(kind)]; }
constexpr const char *opMnemonic(OpKind kind) { return opInfo(kind).mnemonic; }
constexpr int opNumOperands(OpKind kind) { return opInfo(kind).operands; }
constexpr OpCategory opCategory(OpKind kind) { return opInfo(kind).category; }
constexpr FlopModel opFlopModel(OpKind kind) { return opInfo(kind).flops; }

} // namespace kiln::ir
