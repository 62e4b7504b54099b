// kiln/passes/Passes.h - the Kiln compiler passes (declared in Passes.td).
//
//   kiln-autocast   (ModuleOp)  kiln.convert ops for mixed precision (AutocastPolicy.h)
//   kiln-remat      (ModuleOp)  marks which forward values of @joint to save
//   kiln-partition  (ModuleOp)  @joint -> @forward + @backward
//   kiln-fuse       (ModuleOp)  elementwise ops + reductions -> kiln.fusion
//
// See passes/DESIGN.md for the rules of each pass.
#pragma once

#include <memory>

#include "kiln/ir/KilnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace kiln::passes {

// Declares createKilnAutocastPass(), createKilnRematPass(),
// createKilnPartitionPass() and createKilnFusePass(), each returning a
// std::unique_ptr<mlir::Pass> (passes with options also take their options
// struct: KilnAutocastPassOptions, KilnRematPassOptions, KilnFusePassOptions).
#define GEN_PASS_DECL
#include "kiln/passes/Passes.h.inc"

// Declares registerKilnPasses(): registers every kiln pass with the global
// pass registry (for kiln-opt and textual pipelines). Safe to call again.
#define GEN_PASS_REGISTRATION
#include "kiln/passes/Passes.h.inc"

} // namespace kiln::passes
