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

/// A bf16 layer_norm over 4096-element rows (statistics in f32; a block per
/// row), as kiln-fuse sees it from the traced op, for `rows` rows: the
/// emitter's printed-form test and the simulator's long-row test share it.
inline std::string layerNormBf16Text(int rows) {
  std::string text = R"(
func.func @layer_norm(%xb: tensor<Rx4096xbf16>, %w: tensor<4096xf32>) -> (tensor<Rx4096xbf16>, tensor<Rx1xf32>) {
  %x = kiln.convert %xb : tensor<Rx4096xbf16> -> tensor<Rx4096xf32>
  %inv_n = kiln.constant 0.000244140625 : tensor<Rx1xf32>
  %eps = kiln.constant 1.0e-05 : tensor<Rx1xf32>
  %s = kiln.reduce_sum %x [1] : tensor<Rx4096xf32> -> tensor<Rxf32>
  %sr = kiln.reshape %s : tensor<Rxf32> -> tensor<Rx1xf32>
  %mean = kiln.mul %sr, %inv_n : tensor<Rx1xf32>
  %mb = kiln.broadcast %mean : tensor<Rx1xf32> -> tensor<Rx4096xf32>
  %d = kiln.sub %x, %mb : tensor<Rx4096xf32>
  %sq = kiln.mul %d, %d : tensor<Rx4096xf32>
  %v = kiln.reduce_sum %sq [1] : tensor<Rx4096xf32> -> tensor<Rxf32>
  %vr = kiln.reshape %v : tensor<Rxf32> -> tensor<Rx1xf32>
  %var = kiln.mul %vr, %inv_n : tensor<Rx1xf32>
  %ve = kiln.add %var, %eps : tensor<Rx1xf32>
  %r = kiln.rsqrt %ve : tensor<Rx1xf32>
  %rb = kiln.broadcast %r : tensor<Rx1xf32> -> tensor<Rx4096xf32>
  %n = kiln.mul %d, %rb : tensor<Rx4096xf32>
  %wb = kiln.broadcast %w : tensor<4096xf32> -> tensor<Rx4096xf32>
  %y = kiln.mul %n, %wb : tensor<Rx4096xf32>
  %yb = kiln.convert %y : tensor<Rx4096xf32> -> tensor<Rx4096xbf16>
  return %yb, %mean : tensor<Rx4096xbf16>, tensor<Rx1xf32>
})";
  const std::string r = std::to_string(rows);
  for (size_t at = text.find("<R"); at != std::string::npos; at = text.find("<R", at))
    text.replace(at + 1, 1, r);
  return text;
}

} // namespace kiln::test
