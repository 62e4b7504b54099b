// kiln/ir/KilnDialect.h - the `kiln` MLIR dialect (declared in KilnDialect.td).
#pragma once

#include "mlir/IR/Dialect.h"

#include "kiln/ir/KilnDialect.h.inc"

namespace mlir {
class DialectRegistry;
class MLIRContext;
} // namespace mlir

namespace kiln::ir {

/// Adds the kiln dialect and the dialects Kiln's pipeline and codegen use
/// (func, arith, tensor, linalg) to `registry`.
void registerKilnDialect(mlir::DialectRegistry &registry);

/// Registers (as above) and loads those dialects into `context`, so a module
/// can be built right away. Safe to call more than once.
void loadKilnDialects(mlir::MLIRContext &context);

} // namespace kiln::ir
