// tests/compiler/cuda/FuseForTests.h - TEST-ONLY: parses kiln MLIR, runs
// kiln-fuse, and emits a fusion with the CUDA C emitter.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "EmitCuda.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/KilnOps.h"
#include "kiln/passes/Passes.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

namespace kiln::test {

using codegen::cuda::EmittedKernel;

/// A module parsed and run through kiln-fuse, with its fusions in order.
struct Fused {
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<kiln::ir::FusionOp> fusions;
};

inline std::unique_ptr<Fused> fuse(const std::string &text, bool runFuse = true) {
  auto f = std::make_unique<Fused>();
  kiln::ir::loadKilnDialects(f->context);
  f->module = mlir::parseSourceString<mlir::ModuleOp>(text, &f->context);
  if (!f->module)
    return nullptr;
  if (runFuse) {
    mlir::PassManager pm(&f->context);
    pm.addPass(kiln::passes::createKilnFusePass());
    if (mlir::failed(pm.run(*f->module)))
      return nullptr;
  }
  f->module->walk([&](kiln::ir::FusionOp op) { f->fusions.push_back(op); });
  return f;
}

/// Emits fusion `index` of `text` (fused); fails the test on an error.
inline EmittedKernel emit(const std::string &text, size_t index = 0) {
  auto f = fuse(text);
  EXPECT_TRUE(f) << "parse/fuse failed:\n" << text;
  if (!f || f->fusions.size() <= index)
    return {};
  std::string error;
  auto k = kiln::codegen::cuda::emitCudaKernel(f->fusions[index], nullptr, "", &error);
  EXPECT_TRUE(mlir::succeeded(k)) << error;
  return mlir::succeeded(k) ? *k : EmittedKernel{};
}

} // namespace kiln::test
