// kiln/codegen/Passes.h - the passes of the CPU target's kernel lowering
// (declared in Passes.td; run by cpu/LowerToLLVM.cpp, on kernel functions):
//
//   kiln-cpu-fuse-linalg-elementwise  linalg elementwise fusion, Kiln's control
//   kiln-cpu-merge-generics           elementwise generics -> one multi-result generic
//   kiln-cpu-tile-rows                row kernels -> a loop over row tiles
//   kiln-cpu-hoist-tile-buffers       tile buffers allocated once per call
//   kiln-cpu-in-place-branch          a branch for results over operands
#pragma once

#include <memory>

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace kiln::codegen {

// Declares createKilnCpu...Pass() for each pass above.
#define GEN_PASS_DECL
#include "kiln/codegen/Passes.h.inc"

// Declares registerKilnCodegenPasses() (kiln-opt). Safe to call again.
#define GEN_PASS_REGISTRATION
#include "kiln/codegen/Passes.h.inc"

} // namespace kiln::codegen
