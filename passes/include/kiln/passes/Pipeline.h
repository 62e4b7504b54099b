// kiln/passes/Pipeline.h - the Kiln compile pipeline as one function.
//
// Stages, in order (pipelineStageNames()):
//   canonicalize -> cse -> [autocast] -> remat -> partition -> fuse
// (autocast only with PipelineOptions::autocast set). Custom passes
// (CustomPassSpec) run before or after any stage.
// `kiln-opt --kiln-pipeline="memory-budget=0.5 autocast=bf16"` runs the same
// passes on a file (registerKilnPipeline), e.g. a KILN_DUMP_IR 00-input.mlir.
// Input: a module from kiln::ir::buildModule (func @joint). Output: func
// @forward (and @backward for joint graphs) holding only kiln.fusion,
// kiln.matmul, layout ops and func.return.
#pragma once

#include <string>
#include <vector>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/LogicalResult.h"

namespace kiln::passes {

/// A textual MLIR pass pipeline (`pipeline`, passes from the MLIR pass
/// registry, run on the module) placed before or after the stage `stage`.
struct CustomPassSpec {
  std::string stage;
  bool after = true;
  std::string pipeline;
};

struct PipelineOptions {
  /// If non-empty, the module is written to `<dir>/00-input.mlir` and after
  /// each stage to `<dir>/<NN>-<stage>.mlir` (NN = 01, 02, ...); the
  /// directory is created if needed (KILN_DUMP_IR).
  std::string dump_ir_dir;
  /// Run kiln-remat (stage "remat") before kiln-partition. Off: the stage
  /// runs no pass and kiln-partition saves every forward value backward
  /// needs except views and constants (AOTAutograd's default_partition).
  bool remat = true;
  /// kiln-remat's memory-budget, in [0, 1] (passes/DESIGN.md): 1 = the
  /// min-cut over cheap ops, 0 = recompute everything from the primals.
  double memory_budget = 1.0;
  /// "bf16" or "f16": run kiln-autocast (dtype=<this>) on @joint before the
  /// partition, so GEMMs (forward and backward) run in that type. Empty
  /// (default): no autocast stage.
  std::string autocast;
  /// kiln-remat's step-time model (its bytes-per-second / flops-per-second
  /// options): the compile target's codegen::CostModel. Defaults: the CPU
  /// target's.
  double bytes_per_second = 26e9;
  double flops_per_second = 130e9;
  /// Passes of the caller's own (kiln::CustomPass), in order.
  std::vector<CustomPassSpec> custom_passes;
};

/// The names of the pipeline stages that runPipeline runs with `options`, in order.
std::vector<std::string> pipelineStageNames(const PipelineOptions &options = {});

/// Runs the pipeline on `module` in place. On failure (a pass or the
/// verifier fails, or a dump file can't be written) returns failure and, if
/// `error` is non-null, a message naming the stage and the MLIR diagnostics.
/// Never throws.
mlir::LogicalResult runPipeline(mlir::ModuleOp module, const PipelineOptions &options, std::string *error);

/// Adds every stage's passes (and the custom passes) to `pm` in runPipeline's
/// order, without dumps: one pass manager running what runPipeline runs.
mlir::LogicalResult buildPipeline(mlir::OpPassManager &pm, const PipelineOptions &options, std::string *error);

/// Registers the pass pipeline `kiln-pipeline` (options memory-budget,
/// remat, autocast, bytes-per-second, flops-per-second) for kiln-opt.
void registerKilnPipeline();

} // namespace kiln::passes
