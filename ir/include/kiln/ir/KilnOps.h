// kiln/ir/KilnOps.h - the ops of the `kiln` dialect (declared in KilnOps.td).
//
// Include this to build or match kiln ops: kiln::ir::AddOp, FusionOp, ...
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/KilnEnums.h.inc"

#define GET_OP_CLASSES
#include "kiln/ir/KilnOps.h.inc"

namespace kiln::ir {

/// True for ops allowed inside a kiln.fusion body: kiln.constant, the
/// elementwise ops (add, sub, mul, div, neg, exp, log, relu, sqrt, rsqrt, tanh,
/// abs, sin, cos, pow, compare, select, convert) and kiln.reduce_sum /
/// kiln.reduce_max.
bool isFusibleOp(mlir::Operation *op);

/// True for the elementwise ops (add..relu, sqrt, rsqrt, tanh, abs, sin, cos,
/// pow, compare, select, convert).
bool isElementwiseOp(mlir::Operation *op);

/// True for kiln.reduce_sum and kiln.reduce_max.
bool isReductionOp(mlir::Operation *op);

/// True for the layout ops that are views at execution time:
/// kiln.transpose, kiln.broadcast, kiln.reshape.
bool isLayoutOp(mlir::Operation *op);

} // namespace kiln::ir
